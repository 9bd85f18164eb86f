"""Run at start-up by the servers the tests launch (server_utils puts this folder on their
PYTHONPATH; their engine processes inherit it): the interpreter speed-up that conftest.py
applies in the test process, for the kernels those processes interpret."""

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    import importlib.util

    _path = os.path.join(os.path.dirname(__file__), os.pardir, "interpreted_triton.py")
    _spec = importlib.util.spec_from_file_location("_strixlm_interpreted_triton", _path)
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    _mod.skip_repeated_lang_patching()
