"""The Python footprint host (tests/footprint.rs): footprint_host.c's twin.

usage: python3 footprint_host.py MODULE STEP...
Loads MODULE (footprint_mod.c built for one backend) with RTLD_LOCAL through ctypes, as
CPython loads PyTorch, and runs each STEP through its fp_step, except `fork` and
`fork-gemm`, which fork here with os.fork (Python's own fork: its at-fork handlers, and the
warning Python 3.12 gives when the process has more than one thread); the child runs
fp_child and leaves with os._exit(0), as multiprocessing's children do. Then dumps "end".
"""
import ctypes
import os
import sys
import time


def main() -> int:
    module = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL | os.RTLD_NOW)
    module.fp_step.argtypes = [ctypes.c_char_p]
    module.fp_child.argtypes = [ctypes.c_int, ctypes.c_int]
    forks = 0
    for step in sys.argv[2:]:
        if step in ("fork", "fork-gemm"):
            forks += 1
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                module.fp_child(forks, step == "fork-gemm")
                os._exit(0)
            for _ in range(2000):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    code = os.waitstatus_to_exitcode(status)
                    module.fp_step(f"note:fork{forks} exit={code}".encode())
                    break
                time.sleep(0.01)
            else:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                module.fp_step(f"note:fork{forks} hung and was killed".encode())
        elif module.fp_step(step.encode()) != 0:
            print(f"footprint_host.py: step {step} failed", file=sys.stderr)
            return 2
    module.fp_step(b"dump:end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
