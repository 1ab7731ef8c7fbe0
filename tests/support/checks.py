"""What the Python interop tests share: a tally of checks that reports every failure and goes on, and
the relative error of two tensors.

    sys.path.insert(0, <tests/support>); from checks import Tally, rel_err
"""


class Tally:
    """Counts passed checks and keeps the description of each failed one."""

    def __init__(self):
        self.passed = 0
        self.failures = []

    def expect(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failures.append(what)
            print("FAILED:", what, flush=True)

    def finish(self):
        """Prints the count and returns the process's exit code (1 when a check failed)."""
        print("%d passed, %d failed" % (self.passed, len(self.failures)))
        return 1 if self.failures else 0


def rel_err(a, b):
    """||a - b|| / ||b|| (Frobenius), as a float."""
    return float((a - b).norm() / b.norm())
