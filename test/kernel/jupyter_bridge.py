"""A Jupyter client for the kernel tests, driven over stdin/stdout with JSON lines.

It uses Debian's jupyter_client (an independent implementation of the protocol)
so that the tests check the kernel against a real client, not against our own
wire code. Each request is one JSON object with "op"; each answer is one JSON
line {"ok": true, ...} or {"ok": false, "error": "..."}. Every receive has a
timeout; nothing is retried.
"""
import datetime
import json
import os
import sys
import time
import traceback

from jupyter_client.manager import KernelManager

km = None
kc = None
# iopub messages read by iopub_wait and not yet returned by collect.
backlog = []


def next_iopub(timeout):
    if backlog:
        return backlog.pop(0)
    return kc.get_iopub_msg(timeout=timeout)


def collect(msg_id, timeout):
    """iopub messages whose parent is msg_id until its idle status, then the shell reply."""
    deadline = time.monotonic() + timeout
    outputs = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no idle status for {msg_id} within {timeout}s; got {outputs}")
        msg = next_iopub(left)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status":
            if msg["content"]["execution_state"] == "idle":
                break
            continue
        outputs.append({"msg_type": msg["msg_type"], "content": msg["content"]})
    reply = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
    if reply["parent_header"].get("msg_id") != msg_id:
        raise RuntimeError(f"shell reply for {reply['parent_header'].get('msg_id')}, expected {msg_id}")
    return {"reply": reply["content"], "outputs": outputs}


def shell_reply(msg_id, timeout):
    reply = kc.get_shell_msg(timeout=timeout)
    if reply["parent_header"].get("msg_id") != msg_id:
        raise RuntimeError("shell reply for another request")
    return reply["content"]


def handle(req):
    global km, kc
    op = req["op"]
    timeout = req.get("timeout", 30)
    if op == "start":
        os.environ["JUPYTER_PATH"] = req["jupyter_path"]
        t0 = time.monotonic()
        km = KernelManager(kernel_name=req.get("kernel_name", "hearth"))
        km.start_kernel(cwd=req.get("cwd"))
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=timeout)
        info = kc.kernel_info(reply=True, timeout=timeout)["content"]
        return {"startup_s": time.monotonic() - t0, "kernel_info": info}
    if op == "execute":
        return collect(kc.execute(req["code"], stop_on_error=req.get("stop_on_error", True), allow_stdin=req.get("allow_stdin", True)), timeout)
    if op == "send_execute":
        return {"msg_id": kc.execute(req["code"], allow_stdin=req.get("allow_stdin", True))}
    if op == "stdin_request":
        msg = kc.get_stdin_msg(timeout=timeout)
        return {"msg_type": msg["msg_type"], "content": msg["content"], "parent_msg_id": msg["parent_header"].get("msg_id")}
    if op == "comm_send":
        # comm_open / comm_msg / comm_close from the "front end", on shell; they have no reply.
        msg = kc.session.msg(req["msg_type"], req["content"])
        kc.shell_channel.send(msg)
        return {"msg_id": msg["header"]["msg_id"]}
    if op == "iopub_wait":
        # Reads iopub until `count` messages of `msg_type` (and, if given, comm_id) arrived; they stay for collect.
        deadline = time.monotonic() + timeout
        seen, matched = [], 0
        while matched < req["count"]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{matched}/{req['count']} {req['msg_type']} within {timeout}s; saw {[m['msg_type'] for m in seen]}")
            msg = kc.get_iopub_msg(timeout=left)
            seen.append(msg)
            if msg["msg_type"] == req["msg_type"] and req.get("comm_id") in (None, msg["content"].get("comm_id")):
                matched += 1
        backlog.extend(seen)
        return {"messages": [{"msg_type": m["msg_type"], "content": m["content"], "metadata": m["metadata"], "parent_msg_id": m["parent_header"].get("msg_id")} for m in seen]}
    if op == "comm_info":
        msg_id = kc.comm_info(req.get("target_name"))
        return {"reply": shell_reply(msg_id, timeout)}
    if op == "input_reply":
        if "made_seconds_ago" not in req:
            kc.input(req["value"])
            return {}
        # A reply whose header says it was made that long ago (a late answer to an earlier prompt).
        msg = kc.session.msg("input_reply", {"value": req["value"]})
        msg["header"]["date"] -= datetime.timedelta(seconds=req["made_seconds_ago"])
        kc.stdin_channel.send(msg)
        return {}
    if op == "collect":
        return collect(req["msg_id"], timeout)
    if op == "heartbeat":
        # jupyter_client's heartbeat thread pings every second; give it two rounds.
        time.sleep(2.5)
        return {"beating": kc.hb_channel.is_beating()}
    if op == "interrupt_signal":
        km.interrupt_kernel()
        return {}
    if op == "interrupt_request":
        msg = kc.session.msg("interrupt_request", {})
        kc.control_channel.send(msg)
        reply = kc.get_control_msg(timeout=timeout)
        return {"reply": reply["content"], "msg_type": reply["msg_type"]}
    if op == "is_complete":
        return {"reply": shell_reply(kc.is_complete(req["code"]), timeout)}
    if op == "complete":
        return {"reply": shell_reply(kc.complete(req["code"], req.get("cursor_pos")), timeout)}
    if op == "inspect":
        return {"reply": shell_reply(kc.inspect(req["code"], req.get("cursor_pos")), timeout)}
    if op == "shutdown":
        msg_id = kc.shutdown()
        reply = kc.get_control_msg(timeout=timeout)
        deadline = time.monotonic() + timeout
        while km.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = km.is_alive()
        process = getattr(km.provisioner, "process", None)
        code = process.poll() if process is not None else None
        if alive:
            km.shutdown_kernel(now=True)
        kc.stop_channels()
        return {"reply": reply and reply["content"], "msg_id": msg_id, "exited": not alive, "exit_code": code}
    raise ValueError(f"unknown op {op}")


for line in sys.stdin:
    if not line.strip():
        continue
    try:
        answer = {"ok": True, **handle(json.loads(line))}
    except Exception as e:  # every failure goes back to the test as data
        answer = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()

if km is not None and km.has_kernel:
    km.shutdown_kernel(now=True)
