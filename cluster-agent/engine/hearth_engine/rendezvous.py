"""A signed rendezvous for a gang's process group.

torch 1.13's TCPStore has no authentication: any local process (or any host that
can reach rank 0) may connect to it and read or write keys. gloo and NCCL put
each rank's listening address in that store, so a forged value could make a rank
connect somewhere else. `SignedStore` wraps the TCPStore: every value a rank sets
carries an HMAC-SHA256 over (key name, value) with the gang's rendezvous key,
which only the gang's members hold (their agents derive it from the cluster
secret, docs/architecture.md "Security model"); a value whose tag does not verify
is never handed to torch. Counters (`add`, used by torch's barrier) cannot be
signed; a forged increment can only make a barrier pass early, after which the
signed `get`s still wait for the real values.
"""
from __future__ import annotations

import hashlib
import hmac
import time
from datetime import timedelta
from typing import List, Optional
from urllib.parse import urlparse

import torch.distributed as dist

from .errors import EngineError

TAG = 32  # bytes of an HMAC-SHA256 tag
RETRY_S = 0.05  # how often a forged value is read again while the real one may still come


def _tag(key: bytes, name: str, value: bytes) -> bytes:
    return hmac.new(key, name.encode() + b"\0" + value, hashlib.sha256).digest()


class SignedStore(dist.Store):
    """A Store whose values are HMAC-signed with the gang's key; see the module comment."""

    def __init__(self, inner: dist.Store, key: bytes, timeout_s: float):
        super().__init__()
        if len(key) < 16:
            raise EngineError("bad_request", "the rendezvous key must be at least 16 bytes")
        self.inner, self.key, self.timeout_s = inner, key, timeout_s
        self.forged = 0  # values that failed their tag (for tests and logs)

    def set(self, name: str, value) -> None:  # noqa: A003 - torch's Store API
        v = value.encode() if isinstance(value, str) else bytes(value)
        self.inner.set(name, _tag(self.key, name, v) + v)

    def get(self, name: str) -> bytes:
        # A forged value may sit under the name before (or instead of) the real one: read
        # again until a value verifies or the deadline passes; never pass a forged one on.
        deadline = time.monotonic() + self.timeout_s
        while True:
            raw = bytes(self.inner.get(name))
            tag, v = raw[:TAG], raw[TAG:]
            if len(raw) >= TAG and hmac.compare_digest(tag, _tag(self.key, name, v)):
                return v
            self.forged += 1
            if time.monotonic() >= deadline:
                raise EngineError("distributed", f"the rendezvous value '{name}' failed its signature until the "
                                                 f"deadline: another process wrote to this gang's rendezvous port")
            time.sleep(RETRY_S)

    def add(self, name: str, amount: int) -> int:
        return self.inner.add(name, amount)

    def compare_set(self, name: str, expected, desired):
        raise EngineError("distributed", "compare_set is not supported on a signed rendezvous")

    def delete_key(self, name: str) -> bool:
        return self.inner.delete_key(name)

    def num_keys(self) -> int:
        return self.inner.num_keys()

    def check(self, names: List[str]) -> bool:
        return self.inner.check(names)

    def wait(self, names: List[str], timeout: Optional[timedelta] = None) -> None:
        if timeout is None:
            self.inner.wait(names)
        else:
            self.inner.wait(names, timeout)

    def set_timeout(self, timeout: timedelta) -> None:
        self.inner.set_timeout(timeout)


def signed_tcp_store(init_method: str, rank: int, world_size: int, key_hex: str, timeout_s: float) -> SignedStore:
    """The TCPStore at `tcp://host:port` (rank 0 serves it), wrapped in a SignedStore."""
    url = urlparse(init_method)
    if url.scheme != "tcp" or not url.hostname or not url.port:
        raise EngineError("bad_request", f"a signed rendezvous needs tcp://host:port; got '{init_method}'")
    try:
        key = bytes.fromhex(key_hex)
    except ValueError:
        raise EngineError("bad_request", "the rendezvous key must be hex (ctx.rendezvous.key)") from None
    inner = dist.TCPStore(url.hostname, url.port, world_size, rank == 0, timedelta(seconds=timeout_s))
    return SignedStore(inner, key, timeout_s)
