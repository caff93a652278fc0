"""Request dispatch for the TypeScript TensorEngine: one model per process, requests
served in order, every failure answered as {code, message, traceback}.

Ops: ping, init_model, set_vocab, generate, resume, release, logprobs, train_init,
train_step, publish, apply, perturb, save_checkpoint, init_folder, digest,
save_state, load_state, shutdown (see docs/engine.md).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
import traceback
from dataclasses import asdict, fields
from typing import Any, BinaryIO, Callable, Dict, List, Optional

import torch
from torch import Tensor

from . import __version__, checkpoint, config as config_mod, randinit, state as trainer_state
from .errors import EngineError
from .batch import BatchRow, batch
from .generate import RowParams, RowResult, SamplingParams, Session, generate, resume
from .grpo import GRPOConfig, TrainBatch, Trainer, init_distributed, sequence_logprobs, shutdown_distributed
from .model import Transformer, build_model
from .protocol import decode_value, encode_value, read_frame, write_frame
from .synthetic import build_synthetic
from .weights import Publisher, apply_sources, model_tensors, perturb_bf16

# Every collective (and the rendezvous) of a trainer's process group fails after this, so a
# rank whose peer died or hangs is not stuck for torch's default of 30 min. The head fails a
# gang within seconds from its executors' heartbeats; this is the backstop inside the engine.
DEFAULT_COLLECTIVE_TIMEOUT_MS = 300_000

# Kept generation sessions (each holds a KV cache); older ones are released first. The
# agent endpoint keeps one per batch it ran while a row of it may still be continued.
MAX_SESSIONS = 32
DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _ragged(flat: Any, lengths: Any) -> List[List[int]]:
    """Flat int tensor + lengths -> list of rows."""
    ids, out, at = torch.as_tensor(flat).reshape(-1).tolist(), [], 0
    for n in torch.as_tensor(lengths).reshape(-1).tolist():
        out.append(ids[at: at + n])
        at += n
    if at != len(ids):
        raise EngineError("bad_request", f"lengths sum to {at} but {len(ids)} tokens were sent")
    return out


def _rows_result(results: List[RowResult]) -> Dict[str, Any]:
    out = {
        "tokens": torch.tensor([t for r in results for t in r.tokens], dtype=torch.int32),
        "logprobs": torch.tensor([p for r in results for p in r.logprobs], dtype=torch.float32),
        "lengths": torch.tensor([len(r.tokens) for r in results], dtype=torch.int32),
        "finish_reasons": [r.finish_reason for r in results],
        "stops": [r.stop for r in results],
    }
    if any(r.top for r in results):
        # Each generated token's alternatives (asked for with top_logprobs), flat: counts per token, tokens per row.
        out["top_counts"] = torch.tensor([len(t[0]) for r in results for t in r.top], dtype=torch.int32)
        out["top_ids"] = torch.tensor([i for r in results for t in r.top for i in t[0]], dtype=torch.int32)
        out["top_logprobs"] = torch.tensor([v for r in results for t in r.top for v in t[1]], dtype=torch.float32)
        out["entropy"] = torch.tensor([t[2] for r in results for t in r.top], dtype=torch.float32)
        out["top_rows"] = torch.tensor([len(r.top) for r in results], dtype=torch.int32)
    return out


def _params(args: Dict[str, Any], cls: Any) -> Any:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(args) - names)
    if unknown:
        raise EngineError("bad_request", f"unknown {cls.__name__} fields: {unknown}")
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in args.items()})


def blas_library() -> str:
    """The BLAS this process loaded (from /proc/self/maps): Debian's torch links libblas.so.3,
    which is the reference BLAS (~10x slower matrix products) unless OpenBLAS is installed."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                name = line.rsplit(" ", 1)[-1].strip()
                if "libopenblas" in name or "libblas.so" in name or "libmkl" in name:
                    return name
    except OSError:
        pass
    return "unknown"


class Engine:
    """Process state: the model, vocabulary, generation sessions, trainer, publisher."""

    def __init__(self) -> None:
        self.model: Optional[Transformer] = None
        self.source_config: Dict[str, Any] = {}  # the config.json the model came from (kept on save)
        self.vocab: Optional[List[bytes]] = None
        self.sessions: Dict[int, Session] = {}
        self.next_session = 1
        self.trainer: Optional[Trainer] = None
        self.publisher = Publisher()
        self.version = 0
        # Sends an event of the request being served (a shard written) before its reply; set by serve().
        self.emit: Callable[[dict], None] = lambda event: None
        self.ops: Dict[str, Callable[[Dict[str, Any]], Any]] = {
            name[3:]: getattr(self, name) for name in dir(self) if name.startswith("op_")}

    def need_model(self) -> Transformer:
        if self.model is None:
            raise EngineError("no_model", "send init_model first")
        return self.model

    def op_ping(self, args: Dict[str, Any]) -> Any:
        return {"version": __version__, "torch": torch.__version__, "pid": os.getpid(),
                "cuda": torch.cuda.is_available(), "threads": torch.get_num_threads()}

    def op_init_model(self, args: Dict[str, Any]) -> Any:
        threads = int(args.get("threads") or os.environ.get("HEARTH_THREADS") or os.cpu_count() or 1)
        torch.set_num_threads(threads)
        device = args.get("device", "auto")
        device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        dtype_name = args.get("dtype", "auto")
        if dtype_name == "auto":
            dtype_name = "bfloat16" if device.startswith("cuda") else "float32"
        if dtype_name not in DTYPE_NAMES:
            raise EngineError("bad_request", f"unknown dtype {dtype_name!r}")
        dtype = DTYPE_NAMES[dtype_name]
        path = args.get("checkpoint")
        spec = args.get("config", path)
        if isinstance(spec, dict) and "synthetic_bytes" in spec:
            return self._init_synthetic(spec, int(args.get("seed", 0)), device, threads)
        if spec is None:
            raise EngineError("bad_request", "init_model needs config (preset, path or dict) or checkpoint")
        cfg = config_mod.resolve(spec, args.get("overrides"))
        self.source_config = config_mod.source_fields(spec)
        t0 = time.perf_counter()
        if path:
            self.model = checkpoint.load_model(path, device, dtype, cfg)
        else:
            self.model = build_model(cfg, int(args.get("seed", 0)), device, dtype)
        self.model.eval()
        self.sessions.clear()
        self.trainer, self.publisher, self.version = None, Publisher(), 0
        return {"config": cfg.to_hf(), "params": cfg.num_params(), "device": device, "dtype": dtype_name,
                "threads": threads, "seconds": time.perf_counter() - t0, "blas": blas_library()}

    def _init_synthetic(self, spec: Dict[str, Any], seed: int, device: str, threads: int) -> Any:
        """Named bf16 tensors of `synthetic_bytes` in all, random from `seed` or, with
        `"zeros": true`, zeros (a reader about to receive them): the weight path at a
        model's size without the model (synthetic.py)."""
        t0 = time.perf_counter()
        extra = {"tensor_elements": int(spec["tensor_elements"])} if spec.get("tensor_elements") else {}
        self.model = build_synthetic(int(spec["synthetic_bytes"]), seed, device, not spec.get("zeros"), **extra)
        self.source_config = {}
        self.sessions.clear()
        self.trainer, self.publisher, self.version = None, Publisher(), 0
        cfg = self.model.config
        return {"config": cfg.to_hf(), "params": cfg.num_params(), "device": device, "dtype": "bfloat16",
                "threads": threads, "seconds": time.perf_counter() - t0, "blas": blas_library()}

    def op_set_vocab(self, args: Dict[str, Any]) -> Any:
        data, offsets = bytes(args["data"]), args["offsets"].reshape(-1).tolist()
        if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(data) or \
                any(b < a for a, b in zip(offsets, offsets[1:])):
            raise EngineError("bad_request", "vocab offsets must rise from 0 to the data length")
        self.vocab = [data[a:b] for a, b in zip(offsets, offsets[1:])]
        return {"size": len(self.vocab)}

    def op_generate(self, args: Dict[str, Any]) -> Any:
        model = self.need_model()
        model.eval()
        prompts = _ragged(args["tokens"], args["lengths"])
        session, results = generate(model, prompts, _params(args.get("params", {}), SamplingParams),
                                    self.vocab, args.get("capacity"))
        sid = self.next_session
        self.next_session += 1
        if args.get("keep", True):
            self.sessions[sid] = session
            while len(self.sessions) > MAX_SESSIONS:  # oldest first: dicts keep insertion order
                self.sessions.pop(next(iter(self.sessions)))
        return {"session": sid, **_rows_result(results)}

    def op_resume(self, args: Dict[str, Any]) -> Any:
        session = self.sessions.get(int(args["session"]))
        if session is None:
            raise EngineError("no_session", f"no session {args['session']} (released or never kept)")
        rows = [int(r) for r in args["rows"]]
        extra = _ragged(args["tokens"], args["lengths"])
        if len(extra) != len(rows):
            raise EngineError("bad_request", "rows and lengths differ in length")
        results = resume(session, dict(zip(rows, extra)), _params(args.get("params", {}), SamplingParams),
                         self.vocab)
        return _rows_result(results)

    def op_batch(self, args: Dict[str, Any]) -> Any:
        """Rows from different requests in one batch (generate.batch): new prompts and
        continuations of rows of kept sessions, each with its own sampling settings. The
        reply adds, per row, the sha256 of the ids it sampled (int32 little-endian) and,
        where asked, each token's top-k alternatives and entropy."""
        model = self.need_model()
        model.eval()
        feeds = _ragged(args["tokens"], args["lengths"])
        n = len(feeds)
        per_row = {k: list(args.get(k) or []) for k in ("sources", "seeds", "max_new_tokens", "temperature", "top_p",
                                                       "stop", "top_logprobs")}
        streams = list(args.get("stream") or [False] * n)
        for k, v in per_row.items():
            if len(v) != n:
                raise EngineError("bad_request", f"{k} has {len(v)} entries for {n} rows")
        rows: List[BatchRow] = []
        for i in range(n):
            src = per_row["sources"][i]
            source, expect = None, 0
            if src is not None:
                sid, row, expect = (int(x) for x in src)
                session = self.sessions.get(sid)
                if session is None:
                    raise EngineError("no_session", f"row {i}: no session {sid} (released or evicted): send the "
                                                    "whole sequence as a new row")
                source = (session, row)
            rows.append(BatchRow(feed=feeds[i], source=source, expect=expect, seed=int(per_row["seeds"][i]),
                                 params=RowParams(max_new_tokens=int(per_row["max_new_tokens"][i]),
                                                  temperature=float(per_row["temperature"][i]),
                                                  top_p=float(per_row["top_p"][i]),
                                                  stop=tuple(per_row["stop"][i] or ()),
                                                  top_logprobs=int(per_row["top_logprobs"][i]),
                                                  stream=bool(streams[i]) if i < len(streams) else False)))
        params = SamplingParams(eos_token_ids=tuple(args.get("eos_token_ids") or ()),
                                cuda_graph=bool(args.get("cuda_graph", True)))
        # Rows that stream get their tokens as events, step by step, before the reply.
        on_step = (lambda rs, ts: self.emit({"type": "tokens", "rows": rs, "tokens": ts})) if any(streams) else None
        session, results = batch(model, rows, params, self.vocab, on_step)
        sid = self.next_session
        self.next_session += 1
        if args.get("keep", True):
            self.sessions[sid] = session
            while len(self.sessions) > MAX_SESSIONS:
                self.sessions.pop(next(iter(self.sessions)))
        return {"session": sid, **_rows_result(results),
                "digests": [hashlib.sha256(torch.tensor(r.tokens, dtype=torch.int32).numpy().astype("<i4").tobytes())
                            .hexdigest() for r in results]}

    def op_release(self, args: Dict[str, Any]) -> Any:
        return {"released": self.sessions.pop(int(args["session"]), None) is not None}

    def op_logprobs(self, args: Dict[str, Any]) -> Any:
        model = self.need_model()
        tokens = torch.as_tensor(args["tokens"]).to(torch.long)  # (N, T)
        rows = max(1, int(args.get("micro_batch_size", 8)))  # bounds the (rows, T, V) logits
        model.eval()
        parts = [torch.zeros(tokens.shape[0], 1)]
        with torch.no_grad():
            chunks = [sequence_logprobs(model, tokens[i: i + rows].to(model.lm_head.weight.device))[0].cpu()
                      for i in range(0, tokens.shape[0], rows)]
        parts.append(torch.cat(chunks) if chunks else torch.zeros(0, max(tokens.shape[1] - 1, 0)))
        out = {"logprobs": torch.cat(parts, dim=1)}
        k = int(args.get("top_k") or 0)
        if k > 0:
            # The k most likely next tokens at each position of each row, from the same forward: what a replay's
            # alternatives are checked against. (N, T, k), position t predicting token t (position 0: nothing).
            if not 0 < k <= 20:
                raise EngineError("bad_request", "top_k must be in [1, 20]")
            ids, lps = [], []
            with torch.no_grad():
                for i in range(0, tokens.shape[0], rows):
                    logits = model(tokens[i: i + rows].to(model.lm_head.weight.device))[:, :-1].float()
                    v, t = torch.log_softmax(logits, dim=-1).topk(k, dim=-1)  # (n, T-1, k)
                    pad = torch.zeros(v.shape[0], 1, k)
                    lps.append(torch.cat([pad, v.cpu()], dim=1))
                    ids.append(torch.cat([pad.to(torch.long), t.cpu()], dim=1))
            out["top_ids"] = torch.cat(ids).to(torch.int32)
            out["top_logprobs"] = torch.cat(lps)
        return out

    def op_train_init(self, args: Dict[str, Any]) -> Any:
        model = self.need_model()
        d = args.get("distributed")
        backend = None
        if d:
            timeout_s = float(d.get("collective_timeout_ms") or DEFAULT_COLLECTIVE_TIMEOUT_MS) / 1000
            backend = init_distributed(int(d["rank"]), int(d["world_size"]), d["init_method"], d.get("backend"),
                                       timeout_s, d.get("rendezvous_key"))
        self.trainer = Trainer(model, _params(args.get("config", {}), GRPOConfig))
        self.sessions.clear()
        return {"config": asdict(self.trainer.cfg), "backend": backend}

    def op_train_step(self, args: Dict[str, Any]) -> Any:
        if self.trainer is None:
            raise EngineError("no_trainer", "send train_init first")
        tokens = torch.as_tensor(args["tokens"]).to(torch.long)
        shape = tokens.shape

        def aligned(name: str) -> Optional[Tensor]:
            t = args.get(name)
            if t is None:
                return None
            t = torch.as_tensor(t)
            t = t.float() if name != "mask" else t.to(torch.bool)
            if name == "advantages" and t.dim() == 1:
                t = t[:, None].expand(shape)
            if t.shape != shape:
                raise EngineError("bad_request", f"{name} is {list(t.shape)}, tokens are {list(shape)}")
            return t

        batch = TrainBatch(tokens, aligned("mask"), aligned("advantages"), aligned("old_logprobs"),
                           aligned("ref_logprobs"))
        self.sessions.clear()  # cached keys/values are stale once weights move
        t0 = time.perf_counter()
        metrics = self.trainer.step(batch, collective=not bool(args.get("local", False)))
        metrics["seconds"] = time.perf_counter() - t0
        return metrics

    def op_publish(self, args: Dict[str, Any]) -> Any:
        model = self.need_model()
        if args.get("max_shard_bytes"):
            self.publisher.max_shard_bytes = int(args["max_shard_bytes"])
        full = bool(args.get("full", False))
        if args.get("version") is not None:
            # A publisher that takes over from a lost one (trainers restored from a snapshot)
            # goes on at the version its readers hold: a fresh base of the same weights.
            self.publisher.version = int(args["version"]) - 1
            full = True
        if args.get("out_dir"):
            # Each blob is written to a file and announced as it is complete: nothing large crosses the pipe.
            files, stats = self.publisher.publish_files(model, full, args["out_dir"], self.emit,
                                                        keep_last=args.get("keep_last", True) is not False,
                                                        inline_max=int(args.get("inline_max") or 0))
            return {**asdict(stats), "files": files}
        blobs, stats = self.publisher.publish(model, full)
        return {**asdict(stats), "blobs": blobs}

    def op_perturb(self, args: Dict[str, Any]) -> Any:
        """A simulated optimizer step (benchmarks, tests): see weights.perturb_bf16."""
        self.sessions.clear()
        return perturb_bf16(self.need_model(), float(args["share"]), int(args.get("seed", 0)),
                            args.get("dense"), float(args.get("dense_share", 0.4)))

    def op_apply(self, args: Dict[str, Any]) -> Any:
        """Applies publications in order (weights.apply_blobs: the whole chain is checked
        before a tensor is written): `sources` ({blob} or {path, offset?, length?}: a node's
        copy, mapped and read in place), or `blobs` (bytes in the request) then `files`."""
        model = self.need_model()
        sources = args.get("sources")
        if sources is None:
            sources = [{"blob": b} for b in args.get("blobs") or []] + list(args.get("files") or [])
        if not isinstance(sources, list):
            raise EngineError("bad_request", f"sources must be a list of publications to apply; got {type(sources).__name__}")
        for src in sources:
            if not isinstance(src, dict) or not (isinstance(src.get("path"), str) or "blob" in src):
                raise EngineError("bad_request", f"each publication to apply must be {{blob}} or {{path, offset?, length?}}; got {src!r}")
        try:
            results = apply_sources(model_tensors(model), sources, self.version if self.version else None)
        finally:
            self.sessions.clear()  # the weights may have changed, even when a blob failed part way
        if results:
            self.version = results[-1].version
        return {"version": self.version, "applied": [asdict(r) for r in results]}

    def op_save_checkpoint(self, args: Dict[str, Any]) -> Any:
        dtype = DTYPE_NAMES.get(args.get("dtype", "bfloat16"), torch.bfloat16)
        files = checkpoint.save_model(self.need_model(), args["path"], dtype,
                                      int(args.get("max_shard_bytes") or checkpoint.DEFAULT_SHARD_BYTES),
                                      self.source_config)
        return {"files": files}

    def op_init_folder(self, args: Dict[str, Any]) -> Any:
        """Write a random-weight HF folder (config.json + safetensors) from a preset or config;
        needs no init_model and leaves this engine's model alone."""
        cfg = config_mod.resolve(args["config"], args.get("overrides"))
        need = int(args.get("min_vocab_size") or 0)
        if cfg.vocab_size < need:
            raise EngineError("bad_config", f"vocab_size {cfg.vocab_size} is smaller than the tokenizer's "
                                            f"{need} token ids; pick a shape whose vocabulary covers it")
        dtype = DTYPE_NAMES.get(args.get("dtype", "bfloat16"))
        if dtype is None:
            raise EngineError("bad_request", f"unknown dtype {args.get('dtype')!r}")
        return randinit.write_random_folder(cfg, args["path"], int(args.get("seed", 0)), dtype,
                                            int(args.get("max_shard_bytes") or checkpoint.DEFAULT_SHARD_BYTES),
                                            args.get("extra_config"))

    def op_digest(self, args: Dict[str, Any]) -> Any:
        """sha256 of the bf16 weights (sorted HF names): equal digests mean bit-identical policies."""
        h = hashlib.sha256()
        tensors = model_tensors(self.need_model())
        for name in sorted(tensors):
            # One tensor at a time, cast only when it is not bf16 already: no copy of the model.
            t = tensors[name].detach()
            t = t if t.dtype == torch.bfloat16 else t.to(torch.bfloat16)
            h.update(name.encode())
            h.update(memoryview(t.contiguous().view(torch.int16).cpu().numpy()))
        return {"digest": h.hexdigest(), "tensors": len(tensors), "version": self.version}

    def op_state_digest(self, args: Dict[str, Any]) -> Any:
        """sha256 of the trainer's exact state: fp32 master weights and, per parameter, the
        AdamW moments (exp_avg, exp_avg_sq) and step. Equal digests mean an identical resume."""
        if self.trainer is None:
            raise EngineError("no_trainer", "send train_init first")
        t = self.trainer
        weights, moments = hashlib.sha256(), hashlib.sha256()
        for name, p in sorted(t.model.named_parameters()):
            weights.update(name.encode())
            weights.update(p.detach().float().contiguous().cpu().numpy().tobytes())
            st = t.opt.state.get(p, {})
            moments.update(name.encode())
            for key in ("exp_avg", "exp_avg_sq", "step"):
                v = st.get(key)
                if v is not None:
                    moments.update(key.encode())
                    moments.update(torch.as_tensor(v).detach().float().contiguous().cpu().numpy().tobytes())
        return {"weights": weights.hexdigest(), "moments": moments.hexdigest(), "steps": t.steps}

    def op_save_state(self, args: Dict[str, Any]) -> Any:
        """Write the trainer's exact state (fp32 master, frozen reference, AdamW, step) into
        the folder `path` (safetensors + JSON, see state.py) for resume."""
        if self.trainer is None:
            raise EngineError("no_trainer", "send train_init first")
        return trainer_state.save_state(self.trainer, args["path"])

    def op_load_state(self, args: Dict[str, Any]) -> Any:
        """Restore what save_state wrote in the folder `path` (after train_init with the same config)."""
        if self.trainer is None:
            raise EngineError("no_trainer", "send train_init first")
        result = trainer_state.load_state(self.trainer, args["path"])
        self.sessions.clear()
        return result

    def op_shutdown(self, args: Dict[str, Any]) -> Any:
        shutdown_distributed()
        return {"bye": True}

    def handle(self, header: Dict[str, Any], payloads: List[bytearray]) -> Any:
        """Run one request; raises on failure."""
        op = self.ops.get(str(header.get("op")))
        if op is None:
            raise EngineError("unknown_op", f"unknown op {header.get('op')!r}; known: {sorted(self.ops)}")
        return op(decode_value(header.get("args") or {}, payloads))


def serve(inp: BinaryIO, out: BinaryIO) -> int:
    """Serve frames until end of input or shutdown; returns the exit code."""
    engine = Engine()
    while True:
        frame = read_frame(inp)
        if frame is None:
            return 0
        header, payloads = frame
        rid = header.get("id")
        engine.emit = lambda event, rid=rid: write_frame(out, {"id": rid, "event": event}, [])
        try:
            payload_out: List[Any] = []
            result = encode_value(engine.handle(header, payloads), payload_out)
            write_frame(out, {"id": rid, "ok": True, "result": result}, payload_out)
        except Exception as e:  # noqa: BLE001 - every failure goes back to the caller
            code = e.code if isinstance(e, EngineError) else "internal"
            message = e.message if isinstance(e, EngineError) else f"{type(e).__name__}: {e}"
            write_frame(out, {"id": rid, "ok": False, "error": {
                "code": code, "message": message, "type": type(e).__name__,
                "traceback": traceback.format_exc()}}, [])
        if header.get("op") == "shutdown":
            return 0


def start_parent_watchdog(poll_s: float = 0.2, beat_fd: Optional[int] = None) -> threading.Thread:
    """Exit the moment the parent (the executor) is gone, even mid-request; heartbeat on `beat_fd`.

    While a request computes, the main thread is not reading stdin, so it
    would never see EOF; this thread polls the parent pid instead (a dead
    parent reparents us) and ends the process, freeing its GPU memory. With
    `beat_fd` it also writes one byte per poll there: the TypeScript link kills
    the engine as hung when the beats stop (the process is stopped or frozen,
    or a C call holds the GIL), which no request deadline would see soon.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(3)
            if beat_fd is not None:
                try:
                    os.write(beat_fd, b".")
                except OSError:  # the reading end is gone: so is the parent
                    os._exit(3)

    thread = threading.Thread(target=watch, name="hearth-parent-watchdog", daemon=True)
    thread.start()
    return thread


def main() -> int:
    """Entry point: protocol on the original stdout; anything printed goes to stderr."""
    beat = os.environ.get("HEARTH_ENGINE_BEAT_FD")
    start_parent_watchdog(beat_fd=int(beat) if beat else None)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    return serve(sys.stdin.buffer, out)
