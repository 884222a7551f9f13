"""Python host for the end-to-end tests: loads the C host as an extension-like module with
RTLD_LOCAL (as CPython loads extension modules, and so as PyTorch's rocBLAS ends up), so
rocBLAS is not in the global scope and dlsym(RTLD_NEXT) from the preload finds nothing.

usage: python3 py_host.py MODULE.so [--exit-hard] ARGS...   (ARGS as for gemm_host)
  --exit-hard   leave with os._exit(0), which skips atexit handlers
"""
import ctypes
import os
import sys


def main() -> int:
    module_path, args = sys.argv[1], sys.argv[2:]
    exit_hard = "--exit-hard" in args
    args = [a for a in args if a != "--exit-hard"]
    module = ctypes.CDLL(module_path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    argv = [b"py_host"] + [a.encode() for a in args]
    c_argv = (ctypes.c_char_p * len(argv))(*argv)
    module.host_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    module.host_main.restype = ctypes.c_int
    rc = module.host_main(len(argv), c_argv)
    sys.stdout.flush()
    if exit_hard:
        os._exit(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
