"""Issue 5 (black-box agent): the ModelService's OpenAI-compatible API over TCP and the Unix
socket: auth, models, chat completions with tools and tool_calls, streaming (SSE)."""

from __future__ import annotations

import json

import httpx

from services.common.renderers.qwen3 import reply_message

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a bash command",
                                         "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                        "required": ["command"]}}}
CALL_TEXT = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'


def _sse(text: str) -> list[dict]:
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def _assemble(chunks: list[dict]) -> tuple[dict, str]:
    """An OpenAI client's reassembly of streamed deltas into one message."""
    msg: dict = {"role": None, "content": "", "tool_calls": []}
    finish = None
    for c in chunks:
        for ch in c["choices"]:
            d = ch["delta"]
            msg["role"] = d.get("role") or msg["role"]
            msg["content"] += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                while len(msg["tool_calls"]) <= tc["index"]:
                    msg["tool_calls"].append({"id": None, "type": "function",
                                              "function": {"name": "", "arguments": ""}})
                t = msg["tool_calls"][tc["index"]]
                t["id"] = tc.get("id") or t["id"]
                t["function"]["name"] += (tc.get("function") or {}).get("name") or ""
                t["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    return msg, finish


def test_auth_health_models_and_transports(modelservice):
    assert httpx.get(modelservice.url + "/health").json()["status"] == "ok"
    for path in ("/v1/models", "/sessions"):
        r = httpx.get(modelservice.url + path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(modelservice.url + "/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    with modelservice.client() as c:
        assert c.get("/v1/models").json()["data"][0]["id"] == "local/qwen3-tiny-xs"
        assert c.get("/v1/models", headers={"Authorization": "", "X-Key": modelservice.key}).status_code == 200
        sid = c.post("/sessions", json={"task_id": "t"}).json()["session_id"]
        # on TCP even a session path needs the key
        assert httpx.get(f"{modelservice.url}/s/{sid}/v1/models").status_code == 401
    with modelservice.uds_client() as u:
        # on the Unix socket the session id is the capability; admin routes still need the key
        assert u.get(f"/s/{sid}/v1/models").status_code == 200
        assert u.get("/s/ms-unknown/v1/models").status_code == 404
        assert u.get("/sessions").status_code == 401
        assert u.get("/v1/models").status_code == 401
    with modelservice.client() as c:
        assert c.delete(f"/sessions/{sid}").status_code == 200
        assert c.get(f"/sessions/{sid}").status_code == 404


def test_chat_round_trip_sampled_and_streamed(modelservice, tokenizer):
    with modelservice.client() as c:
        sid = c.post("/sessions", json={"task_id": "api"}).json()["session_id"]
        body = {"model": "local/qwen3-tiny-xs", "max_tokens": 24, "tools": [BASH], "seed": 7, "logprobs": True,
                "messages": [{"role": "system", "content": "You are a helpful assistant."},
                             {"role": "user", "content": [{"type": "text", "text": "List the files."}]}]}
        r = c.post(f"/s/{sid}/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["object"] == "chat.completion" and d["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
        assert d["usage"]["completion_tokens"] <= 24 and d["usage"]["prompt_tokens"] > 100
        lp = d["choices"][0]["logprobs"]["content"]
        assert len(lp) == d["usage"]["completion_tokens"] and all(x["logprob"] <= 0 for x in lp)
        rec = c.get(f"/sessions/{sid}").json()
        turn = rec["trajectory"]["turns"][0]
        # what the agent received is what the stored sampled tokens decode to
        body_ids = turn["sampled_tokens"][:-1] if turn["stop_reason"] == "stop" else turn["sampled_tokens"]
        text = tokenizer.decode(body_ids, skip_special_tokens=False)
        assert text == turn["text"]
        assert reply_message(text, id_prefix="call_0")[0]["content"] == d["choices"][0]["message"]["content"]
        assert [x["logprob"] for x in lp] == turn["logprobs"]

        # streamed: the same request again in a fresh session, same seed -> the same reply
        sid2 = c.post("/sessions", json={}).json()["session_id"]
        s = c.post(f"/s/{sid2}/v1/chat/completions",
                   json={**body, "stream": True, "stream_options": {"include_usage": True}})
        assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
        chunks = _sse(s.text)
        msg, finish = _assemble([ch for ch in chunks if ch["choices"]])
        assert msg["role"] == "assistant" and msg["content"] == (d["choices"][0]["message"]["content"] or "")
        assert finish == d["choices"][0]["finish_reason"]
        assert chunks[-1]["usage"] == d["usage"]


def test_tool_calls_plain_and_streamed(modelservice):
    with modelservice.client() as c:
        sid = c.post("/sessions", json={"replay": [CALL_TEXT]}).json()["session_id"]
        body = {"model": "m", "tools": [BASH], "messages": [{"role": "user", "content": "What is here?"}]}
        d = c.post(f"/s/{sid}/v1/chat/completions", json=body).json()
        m = d["choices"][0]["message"]
        assert d["choices"][0]["finish_reason"] == "tool_calls"
        assert m["content"] == "Let me look."
        assert len(m["tool_calls"]) == 1 and m["tool_calls"][0]["type"] == "function"
        assert m["tool_calls"][0]["function"]["name"] == "bash"
        assert json.loads(m["tool_calls"][0]["function"]["arguments"]) == {"command": "ls -la"}
        # default session over TCP (X-Session-Id), streamed
        sid2 = c.post("/sessions", json={"replay": [CALL_TEXT]}).json()["session_id"]
        s = c.post("/v1/chat/completions", json={**body, "stream": True}, headers={"X-Session-Id": sid2})
        msg, finish = _assemble(_sse(s.text))
        assert finish == "tool_calls" and msg["content"] == "Let me look."
        assert msg["tool_calls"][0]["function"]["name"] == "bash"
        assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"command": "ls -la"}
        rec = c.get(f"/sessions/{sid2}").json()
        assert rec["trajectory"]["turns"][0]["tool_calls"] == [{"name": "bash", "arguments": {"command": "ls -la"}}]


def test_bad_requests_are_openai_errors(modelservice):
    with modelservice.client() as c:
        sid = c.post("/sessions", json={}).json()["session_id"]
        for body, code in [({"messages": []}, 400), ({"messages": [{"role": "wizard", "content": "x"}]}, 400),
                           ({"messages": [{"role": "user", "content": "x"}], "n": 2}, 400),
                           ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400)]:
            r = c.post(f"/s/{sid}/v1/chat/completions", json=body)
            assert r.status_code == code and r.json()["error"]["message"], r.text
        assert c.post(f"/s/{sid}/v1/chat/completions", content=b"{nope").status_code == 400
        assert c.post("/s/ms-nope/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "x"}]}).status_code == 404
        assert c.post("/sessions", json={"session_id": sid}).status_code == 409
        assert c.post("/sessions", json={"session_id": "bad id!"}).status_code == 400
        assert c.get("/health").status_code == 200   # still serving
