"""Issue 5 acceptance 4: mini-swe-agent (PyPI, unmodified, .venv-agent) completes a rollout
through the ModelService inside a sandbox without network access, the verifier scores it, and
its turns are captured token-exactly. The sandbox manager runs as a subprocess (local backend:
bubblewrap, own network namespace); the ModelService's socket directory is its only way out."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest
from tinker import types

from cookbook.modelservice.agent_runner import SOCKET_TARGET, run_mini_swe_agent
from helpers import REPO
from services.common.renderers.qwen3 import reply_message
from services.common.trajectory import Trajectory
from services.sandbox.client import SandboxManagerClient
from services.sandbox.errors import BadRequest
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task_and_base(ms_root):
    task = next(t for t in load_dataset(REPO / "datasets" / "micro").tasks if t.path.name == "absolute")
    base = ms_root / "bases" / task.slug
    if not base.exists():
        build_base(task, base)
    return task, base


def _client(admin) -> SandboxManagerClient:
    return SandboxManagerClient(admin.url, admin.key)


PROBE = r"""
import json, socket, sys
out = {}
for name, port in [("modelservice_tcp", int(sys.argv[1])), ("backend_tcp", int(sys.argv[2]))]:
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port)); out[name] = "connected"
    except OSError as e:
        out[name] = type(e).__name__
    s.close()
u = socket.socket(socket.AF_UNIX); u.settimeout(5)
u.connect(sys.argv[3] + "/model.sock")
u.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
data = b""
while chunk := u.recv(65536):
    data += chunk
out["socket_health"] = data.split(b"\r\n", 1)[0].decode()
try:
    open(sys.argv[3] + "/planted", "w"); out["bind_writable"] = True
except OSError:
    out["bind_writable"] = False
print(json.dumps(out))
"""


def test_sandbox_has_no_network_but_reaches_the_socket(sandbox_admin, modelservice, backend, task_and_base):
    ms_port = int(modelservice.url.rsplit(":", 1)[1])
    sock_dir = str(modelservice.socket.parent)

    async def go():
        async with _client(sandbox_admin) as mgr:
            with pytest.raises(BadRequest, match="not under an allowed bind source"):
                await mgr.create(base_dir=str(task_and_base[1]), binds=[{"source": "/etc", "target": "/run/x"}])
            with pytest.raises(BadRequest, match="under /run/ or /mnt/"):
                await mgr.create(base_dir=str(task_and_base[1]), binds=[{"source": sock_dir, "target": "/usr/x"}])
            sb = await mgr.create(base_dir=str(task_and_base[1]), binds=[{"source": sock_dir, "target": SOCKET_TARGET}])
            try:
                await sb.write_file("/tmp/probe.py", PROBE)
                r = await sb.run(f"python3 /tmp/probe.py {ms_port} {backend.port} {SOCKET_TARGET}", timeout=60)
                assert r.exit_code == 0, r.output
                return json.loads(r.output.strip().splitlines()[-1])
            finally:
                await sb.close()

    out = asyncio.run(go())
    assert out["modelservice_tcp"] != "connected" and out["backend_tcp"] != "connected", out
    assert out["socket_health"] == "HTTP/1.1 200 OK", out
    assert out["bind_writable"] is False
    assert not (modelservice.socket.parent / "planted").exists()


def _mini_messages(agent_traj: dict) -> list[dict]:
    return [m for m in agent_traj["messages"] if m.get("role") in ("system", "user", "assistant", "tool")]


def _same(a: dict, b: dict) -> bool:
    return a["role"] == b["role"] and (a.get("content") or "") == (b.get("content") or "")


def _check_token_exact(run, tokenizer, sampling_client) -> Trajectory:
    traj, rec = run.trajectory, run.record
    stops = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")}
    mini_msgs = _mini_messages(run.agent_traj)
    api_calls = run.agent_traj["info"]["model_stats"]["api_calls"]
    assert len(traj.turns) == api_calls == rec["session"]["requests"] >= 1
    for k, (t, info) in enumerate(zip(traj.turns, rec["turn_info"], strict=True)):
        seg = traj.segments[t.segment]
        # the messages the service rendered are mini-swe-agent's own conversation at that call
        sent = info["messages"]
        assert all(_same(a, b) for a, b in zip(sent, mini_msgs, strict=False)) and len(sent) <= len(mini_msgs)
        prompt = seg.tokens[:t.prompt_len]
        rendered = tokenizer.apply_chat_template(sent, tools=info["tools"], add_generation_prompt=True, tokenize=True)
        rendered = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
        if info["template_match"]:
            assert prompt == rendered
        # sampled tokens decode to what mini-swe-agent received
        assert seg.tokens[t.prompt_len:t.prompt_len + len(t.sampled_tokens)] == t.sampled_tokens
        body = t.sampled_tokens[:-1] if t.sampled_tokens and t.sampled_tokens[-1] in stops else t.sampled_tokens
        assert tokenizer.decode(body, skip_special_tokens=False) == t.text
        if k > 0 and t.segment == traj.turns[k - 1].segment:
            p = traj.turns[k - 1]
            assert prompt[:p.prompt_len + len(p.sampled_tokens)] == seg.tokens[:p.prompt_len] + p.sampled_tokens
        else:
            assert k == 0 or info["new_segment"]
    assert traj.segment_breaks == sum(1 for i in rec["turn_info"] if i["new_segment"])
    # what the agent got back, as mini-swe-agent recorded it (its messages keep each raw response)
    responses = [m["extra"]["response"]["choices"][0]["message"] for m in run.agent_traj["messages"]
                 if (m.get("extra") or {}).get("response")]
    assert len(responses) == len(traj.turns)
    for t, got in zip(traj.turns, responses):
        mine, _ = reply_message(t.text, id_prefix=f"call_{t.index}")
        assert (got.get("content") or "") == (mine.get("content") or "")
        assert [c["function"]["name"] for c in got.get("tool_calls") or []] == \
            [c["function"]["name"] for c in mine.get("tool_calls") or []]
    for seg in traj.segments:
        ref = sampling_client.compute_logprobs(types.ModelInput.from_ints(seg.tokens)).result(timeout=120)
        for i, (flag, lp) in enumerate(zip(seg.sampled, seg.logprobs)):
            if flag:
                assert abs(ref[i] - lp) < 1e-3, (i, lp, ref[i])
    return traj


def test_mini_swe_agent_rollout_with_the_tiny_model(sandbox_admin, modelservice, task_and_base, tokenizer,
                                                    sampling_client):
    task, base = task_and_base

    async def go():
        async with _client(sandbox_admin) as mgr:
            return await run_mini_swe_agent(task, mgr, modelservice.url, modelservice.key, modelservice.socket, base,
                                            step_limit=3, max_tokens=48, timeout_s=240)

    run = asyncio.run(go())
    traj = run.trajectory
    assert run.exit_code == 0, run.output[-3000:]
    assert traj.episode_done and run.agent_traj["info"]["exit_status"], run.output[-3000:]
    assert traj.reward in (0.0, 1.0) and not run.verifier["error"], run.verifier   # a valid reward
    assert traj.task_id == task.name
    _check_token_exact(run, tokenizer, sampling_client)
    print("mini-swe-agent (tiny model):", json.dumps({k: v for k, v in run.summary().items() if k != "session"}))


def test_mini_swe_agent_gold_replay_scores_one(sandbox_admin, modelservice, task_and_base, tokenizer, sampling_client):
    """Scripted replies (teacher-forced, real logprobs) make mini-swe-agent's tool calls run in
    the sandbox: read the file, apply the gold edit, submit -> reward 1, one segment."""
    task, base = task_and_base
    e = json.loads((task.solution_dir / "edit.json").read_text())
    code = (f"import pathlib; p = pathlib.Path({e['path']!r}); "
            f"p.write_text(p.read_text().replace({e['old']!r}, {e['new']!r}, 1))")

    def call(cmd: str, pre: str = "") -> str:
        return pre + "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": cmd}}) + "\n</tool_call>"

    script = [call(f"cat {e['path']}", "Let me read the file.\n"), call("python3 -c " + shlex.quote(code)),
              call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]

    async def go():
        async with _client(sandbox_admin) as mgr:
            return await run_mini_swe_agent(task, mgr, modelservice.url, modelservice.key, modelservice.socket, base,
                                            step_limit=5, max_tokens=256, timeout_s=240, replay=script)

    run = asyncio.run(go())
    traj = run.trajectory
    assert run.agent_traj["info"]["exit_status"] == "Submitted", run.output[-3000:]
    assert traj.reward == 1.0 and traj.stop_reason == "submitted" and traj.episode_done
    assert len(traj.segments) == 1 and all(i["template_match"] for i in run.record["turn_info"])
    assert [i["prompt"] for i in run.record["turn_info"]] == ["template", "spliced", "spliced"]
    assert e["old"] in json.loads(traj.turns[0].observations[0])["output"]   # the tool really ran in the sandbox
    _check_token_exact(run, tokenizer, sampling_client)
    saved = Path(modelservice.traj_dir) / run.record["session"]["session_id"] / "trajectory.json"
    assert saved.exists()
