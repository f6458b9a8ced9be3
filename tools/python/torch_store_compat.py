"""libtorch 2.x's Python TCPStore asks for libuv by default, and a torch built without it
(Debian 13's python3-torch 2.6) refuses: "use_libuv was requested but PyTorch was build
without libuv support". init_process_group("env://") reads USE_LIBUV, but torchrun's
rendezvous backends make their stores with the default. patch() makes the default libtorch's
own TCP server where the build has no libuv; it changes nothing on torch 1.13 (no libuv option)
or on builds that have libuv. The C++ side does the same in engine/core/torch_compat.hpp."""
import os


def has_libuv():
    import torch.distributed as dist
    try:
        dist.TCPStore("127.0.0.1", 0, 1, True, use_libuv=True)
    except TypeError:  # torch 1.13: no such option, no libuv
        return False
    except RuntimeError as e:
        if "libuv" in str(e):
            return False
        raise
    return True


def patch():
    import torch.distributed as dist
    if not hasattr(dist, "TCPStore") or has_libuv():
        return
    try:
        dist.TCPStore("127.0.0.1", 0, 1, True, use_libuv=False)
    except TypeError:
        return  # torch 1.13
    os.environ.setdefault("USE_LIBUV", "0")
    base = dist.TCPStore

    class TCPStore(base):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    dist.TCPStore = TCPStore
