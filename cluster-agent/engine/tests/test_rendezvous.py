"""A gang's tcp:// rendezvous is signed: ranks holding the key form a group; a value
written by a process without the key is never used, and an unsigned tcp:// rendezvous
is refused."""

import os
import socket
import subprocess
import sys
import unittest
from datetime import timedelta

import torch.distributed as dist

from hearth_engine.errors import EngineError
from hearth_engine.grpo import init_distributed
from hearth_engine.rendezvous import SignedStore

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE = os.path.dirname(HERE)
KEY = "ab" * 32

# RANK: join a 2-rank gloo group through the signed store, all-reduce, print the sum.
RANK = """
import sys, torch, torch.distributed as dist
from hearth_engine.grpo import init_distributed
rank, init, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
init_distributed(rank, 2, init, "gloo", timeout_s=20.0, rendezvous_key=key)
t = torch.ones(2) * (rank + 1)
dist.all_reduce(t)
print("sum", t.tolist(), flush=True)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SignedRendezvousTest(unittest.TestCase):
    def test_two_ranks_with_the_key_form_a_group(self):
        init = f"tcp://127.0.0.1:{free_port()}"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ENGINE, "GLOO_SOCKET_IFNAME": "lo"}
        procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), init, KEY], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
        try:
            for p in procs:
                out, err = p.communicate(timeout=60)
                self.assertEqual(p.returncode, 0, err[-2000:])
                self.assertIn("sum [3.0, 3.0]", out)
        finally:
            for p in procs:
                p.kill()

    def test_a_value_forged_without_the_key_is_never_returned(self):
        port = free_port()
        server = dist.TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=10))
        signed = SignedStore(server, bytes.fromhex(KEY), timeout_s=0.5)
        # A process that can reach the port but lacks the key writes an address of its choosing.
        intruder = dist.TCPStore("127.0.0.1", port, 1, False, timedelta(seconds=10))
        intruder.set("0/0/1", b"\x00" * 40 + b"attacker-address")
        with self.assertRaisesRegex(EngineError, "failed its signature"):
            signed.get("0/0/1")
        self.assertGreater(signed.forged, 0)
        # The real rank's signed value replaces it and is returned exactly.
        signed.set("0/0/1", b"real-address")
        self.assertEqual(signed.get("0/0/1"), b"real-address")
        # A signed value copied under another key name does not verify there.
        intruder.set("0/0/0", server.get("0/0/1"))
        with self.assertRaisesRegex(EngineError, "failed its signature"):
            signed.get("0/0/0")
        # Another gang's key does not verify either.
        other = SignedStore(server, b"\x01" * 32, timeout_s=0.2)
        with self.assertRaisesRegex(EngineError, "failed its signature"):
            other.get("0/0/1")

    def test_an_unsigned_tcp_rendezvous_is_refused(self):
        with self.assertRaisesRegex(EngineError, "rendezvous key"):
            init_distributed(0, 2, f"tcp://127.0.0.1:{free_port()}", "gloo", timeout_s=2.0)


if __name__ == "__main__":
    unittest.main()
