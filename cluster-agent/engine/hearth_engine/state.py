"""Exact trainer state for resume, without pickle: a folder of safetensors plus JSON.

    trainer-state.json      format, steps, GRPO config, AdamW param_groups, the
                            trainable tensor names in optimiser order and each one's
                            non-tensor AdamW state
    master.safetensors      the fp32 master weights (HF names, tied lm_head excluded)
    reference.safetensors   the frozen KL reference, when the trainer has one
    optimizer.safetensors   per trainable tensor NAME: `NAME:exp_avg`, `NAME:exp_avg_sq`,
                            `NAME:step` (every tensor AdamW keeps, in its own dtype)

Every value is stored bit for bit (tensors raw, floats as JSON's round-trip repr), so
a fresh trainer that loads the folder continues exactly as the saved one would. Files
are written one tensor at a time (a 3B trainer's 36 GB of state never sits in memory
twice) and the JSON last, so a folder with a JSON is complete. Nothing is unpickled.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any, Dict, List

import torch
from torch import Tensor

from . import safetensors
from .checkpoint import expected_shapes
from .errors import EngineError
from .grpo import Trainer
from .model import Transformer

FORMAT = "hearth-trainer-state"
VERSION = 1
MANIFEST = "trainer-state.json"
MASTER, REFERENCE, OPTIMIZER = "master.safetensors", "reference.safetensors", "optimizer.safetensors"


def _named(model: Transformer) -> Dict[str, Tensor]:
    state = model.state_dict()
    return {n: state[n] for n in expected_shapes(model)}


def _trainable_names(t: Trainer) -> List[str]:
    """HF names of the optimiser's parameters, in its order."""
    by_id = {id(p): n for n, p in t.model.named_parameters()}
    return [by_id[id(p)] for p in t.params]


def _save_tensors(path: str, tensors: Dict[str, Tensor]) -> int:
    specs = [(n, v.dtype, tuple(v.shape)) for n, v in tensors.items()]
    return safetensors.write_file(path, specs, lambda n: tensors[n].detach(), {"format": FORMAT})


def _jsonable(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def save_state(t: Trainer, folder: str) -> Dict[str, Any]:
    """Write the trainer's exact state into `folder` (created if missing)."""
    os.makedirs(folder, exist_ok=True)
    manifest_path = os.path.join(folder, MANIFEST)
    if os.path.exists(manifest_path):
        os.unlink(manifest_path)  # until the new JSON lands, the folder reads as incomplete
    names = _trainable_names(t)
    size = _save_tensors(os.path.join(folder, MASTER), _named(t.model))
    if t.ref is not None:
        size += _save_tensors(os.path.join(folder, REFERENCE), _named(t.ref))
    elif os.path.exists(os.path.join(folder, REFERENCE)):
        os.unlink(os.path.join(folder, REFERENCE))
    moments: Dict[str, Tensor] = {}
    scalars: Dict[str, Dict[str, Any]] = {}
    for name, p in zip(names, t.params):
        scalars[name] = {}
        for key, value in t.opt.state.get(p, {}).items():
            if isinstance(value, Tensor):
                moments[f"{name}:{key}"] = value
            else:
                scalars[name][key] = value
    size += _save_tensors(os.path.join(folder, OPTIMIZER), moments)
    groups = [{k: _jsonable(v) for k, v in g.items() if k != "params"} for g in t.opt.param_groups]
    manifest = {"format": FORMAT, "version": VERSION, "steps": t.steps, "grpo": asdict(t.cfg),
                "param_groups": groups, "params": names, "optimizer_state": scalars,
                "reference": t.ref is not None}
    tmp = f"{manifest_path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, manifest_path)
    return {"path": folder, "steps": t.steps, "bytes": size}


def _load_into(targets: Dict[str, Tensor], path: str, what: str) -> None:
    """Copy a safetensors file into same-named, same-shaped tensors, refusing any difference."""
    header = safetensors.read_header(path)
    missing = sorted(set(targets) - set(header))
    extra = sorted(set(header) - set(targets))
    wrong = sorted(f"{n}: state {header[n]['shape']} vs trainer {list(targets[n].shape)}"
                   for n in set(targets) & set(header) if header[n]["shape"] != list(targets[n].shape))
    if missing or extra or wrong:
        raise EngineError("checkpoint_mismatch", f"{path}: the saved {what} does not fit this trainer: "
                                                 f"missing {missing[:4]}, unexpected {extra[:4]}, shapes {wrong[:4]}")
    loaded = safetensors.load_file(path)
    with torch.no_grad():
        for n, target in targets.items():
            target.copy_(loaded.pop(n))
    del loaded


def load_state(t: Trainer, folder: str) -> Dict[str, Any]:
    """Restore what save_state wrote into a trainer built with the same model and config."""
    if os.path.isfile(folder):
        raise EngineError("bad_request", f"{folder} is a file: trainer state is a folder written by save_state "
                                          f"(pickled trainer-state.pt files are not read)")
    manifest_path = os.path.join(folder, MANIFEST)
    try:
        with open(manifest_path, "r", encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError as e:
        raise EngineError("bad_request", f"no trainer state at {folder} ({MANIFEST} missing: never saved, "
                                          f"or the save did not finish)") from e
    except (OSError, ValueError) as e:
        raise EngineError("bad_request", f"{manifest_path}: unreadable: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise EngineError("bad_request", f"{manifest_path}: not a {FORMAT} version {VERSION} manifest")
    names = _trainable_names(t)
    if manifest["params"] != names:
        raise EngineError("bad_request", f"{folder}: saved for trainable tensors {manifest['params'][:3]}... "
                                          f"({len(manifest['params'])}), this trainer trains {names[:3]}... "
                                          f"({len(names)}); use the same model and trainer config")
    if len(manifest["param_groups"]) != len(t.opt.param_groups):
        raise EngineError("bad_request", f"{folder}: {len(manifest['param_groups'])} optimiser groups saved, "
                                          f"this trainer has {len(t.opt.param_groups)}")
    _load_into(_named(t.model), os.path.join(folder, MASTER), "master weights")
    if t.ref is not None and manifest.get("reference"):
        _load_into(_named(t.ref), os.path.join(folder, REFERENCE), "reference")
    moments = safetensors.load_file(os.path.join(folder, OPTIMIZER))
    t.opt.state.clear()
    step_on_param = any(g.get("capturable") or g.get("fused") for g in t.opt.param_groups)
    for name, p in zip(names, t.params):
        entry: Dict[str, Any] = dict(manifest["optimizer_state"].get(name, {}))
        for key in [k for k in moments if k.startswith(name + ":")]:
            value = moments.pop(key)
            # AdamW keeps `step` on the CPU (unless capturable/fused); moments live with the parameter.
            device = torch.device("cpu") if key.endswith(":step") and not step_on_param else p.device
            entry[key[len(name) + 1:]] = value.to(device=device, copy=True)
        if entry:
            t.opt.state[p] = entry
    if moments:
        raise EngineError("checkpoint_mismatch", f"{folder}: optimiser state for unknown tensors {sorted(moments)[:4]}")
    for group, saved in zip(t.opt.param_groups, manifest["param_groups"]):
        for k, v in saved.items():
            group[k] = tuple(v) if isinstance(group.get(k), tuple) else v
    t.steps = int(manifest["steps"])
    return {"steps": t.steps}
