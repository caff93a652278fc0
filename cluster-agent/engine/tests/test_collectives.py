"""Collectives of a trainer's process group have a timeout: a rank whose peer stops
taking part (hung, or stopped) gets an error instead of waiting torch's 30 min."""

import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE = os.path.dirname(HERE)

# RANK INIT: join a 2-rank gloo group with a 2 s timeout; rank 0 then all-reduces, rank 1 never does.
RANK = """
import sys, time, torch, torch.distributed as dist
from hearth_engine.grpo import init_distributed
rank, init = int(sys.argv[1]), sys.argv[2]
init_distributed(rank, 2, init, "gloo", timeout_s=2.0)
print("joined", flush=True)
if rank == 1:
    time.sleep(60)
t0 = time.time()
try:
    dist.all_reduce(torch.ones(4))
    print("reduced", flush=True)
except RuntimeError as e:
    print(f"failed after {time.time() - t0:.1f} s: {e}", flush=True)
# Leave without tearing the group down: after a timed-out collective, gloo's threads may still be
# running, and the interpreter's teardown can then abort (std::terminate) after the result is out.
import os
os._exit(0)
"""


class CollectiveTimeoutTest(unittest.TestCase):
    def test_an_all_reduce_whose_peer_never_takes_part_fails_after_the_timeout(self):
        init = "file://" + os.path.join(tempfile.mkdtemp(), "rendezvous")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ENGINE, "GLOO_SOCKET_IFNAME": "lo"}
        procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), init], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
        try:
            t0 = time.time()
            out, err = procs[0].communicate(timeout=60)
            elapsed = time.time() - t0
            self.assertEqual(procs[0].returncode, 0, err[-2000:])
            self.assertIn("joined", out)
            self.assertNotIn("reduced", out)
            self.assertRegex(out, r"failed after \d+\.\d s: .*[Tt]imed? ?out")
            self.assertLess(elapsed, 45, "the all-reduce waited far past its 2 s timeout")
        finally:
            for p in procs:
                p.kill()
                p.communicate()


if __name__ == "__main__":
    unittest.main()
