"""Child processes that never outlive us: the local vLLM server and the embedded model's conversion."""

import ctypes
import signal

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent() -> None:
    """In the child before exec: have Linux send it SIGTERM if we die, even by SIGKILL, so no server is orphaned.
    Linux ties this to the thread that started the server: start servers from a thread that outlives them."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: a killed parent may leave the server running
        pass
