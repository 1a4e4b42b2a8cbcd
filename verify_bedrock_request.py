"""
verify_bedrock_request.py: check generate_with_bedrock() against the real Bedrock request schema,
without calling AWS.

    python verify_bedrock_request.py        # exit status 0 only if every check holds

botocore's Stubber sits between the client and the network: it validates each request
against the bedrock-runtime service model that ships with botocore, then hands back a
response we wrote ourselves. Nothing leaves the machine, nothing is billed, and the
credentials are dummies. The "answer" printed below is our placeholder, not model output.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, redirect_stderr
from unittest.mock import patch

import rag_from_scratch as rag
from ragkit import generators, support

# The lesson's defaults, read from its function signatures (one source of truth).
BEDROCK_REGION = rag.defaults(rag.generate_with_bedrock)["region"]

FAKE_TEXT = "FAKE STUB TEXT - not produced by a model."
FAKE_REASONING = "FAKE STUB REASONING - a thinking block that must not reach the answer."
REASONING = {"reasoningContent": {"reasoningText": {"text": FAKE_REASONING,
                                                   "signature": "stub-signature"}}}
MODEL_ID = "stub.model-for-request-validation"   # any id will do: the request never leaves
EXPECTED_PARAMS = ["inferenceConfig", "messages", "modelId", "system"]
QUESTION = "How many vacation days do I get each year?"


@contextmanager
def dummy_aws_env():
    """Dummy credentials and no metadata-service probe while the block runs, then restore."""
    with patch.dict(os.environ, {"AWS_ACCESS_KEY_ID": "STUB-NOT-A-REAL-KEY",
                                 "AWS_SECRET_ACCESS_KEY": "stub-secret",
                                 "AWS_EC2_METADATA_DISABLED": "true"}):
        for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            os.environ.pop(key, None)
        yield


def fake_converse_response(blocks: list[dict]) -> dict:
    """A Converse response shaped as the service model requires, holding the given content blocks."""
    return {"output": {"message": {"role": "assistant", "content": blocks}},
            "stopReason": "end_turn", "metrics": {"latencyMs": 0},
            "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}}


def check_converse(prompt: str, blocks: list[dict]) -> tuple[list[str], str]:
    """Send one prompt through generate_with_bedrock, the reply holding `blocks`; return the
    request's parameter names and the text the function kept."""
    from botocore.stub import Stubber
    client, sent = generators.bedrock_client(BEDROCK_REGION), {}
    client.meta.events.register("before-parameter-build.bedrock-runtime.Converse",
                                lambda params, **_: sent.update(params))
    with Stubber(client) as stubber:
        stubber.add_response("converse", fake_converse_response(blocks))
        text = rag.generate_with_bedrock(prompt, model_id=MODEL_ID, client=client)
        stubber.assert_no_pending_responses()
    return sorted(sent), text


def check_wrong_name(prompt: str) -> str:
    """Send `max_tokens` (the real name is `maxTokens`); return the validator's complaint, or ''."""
    from botocore.exceptions import ParamValidationError
    from botocore.stub import Stubber
    client = generators.bedrock_client(BEDROCK_REGION)
    # The Stubber needs a queued reply before it lets a call through to validation;
    # the validator then rejects the request, so this reply is never used.
    with Stubber(client) as stubber:
        stubber.add_response("converse", fake_converse_response([{"text": FAKE_TEXT}]))
        try:
            client.converse(modelId=MODEL_ID,
                            messages=[{"role": "user", "content": [{"text": prompt}]}],
                            inferenceConfig={"max_tokens": 300})
        except ParamValidationError as exc:
            lines = [line for line in str(exc).splitlines() if "Unknown parameter" in line]
            return lines[0].split(", must be")[0] if lines else str(exc)
    return ""


# A ConverseStream reply as the service model describes it: a reasoning delta, the text in two
# deltas, then the closing events. event_message() writes each in AWS's event-stream encoding.
STREAM_EVENTS = [("messageStart", {"role": "assistant"}),
                 ("contentBlockDelta", {"contentBlockIndex": 0,
                                        "delta": {"reasoningContent": {"text": FAKE_REASONING}}}),
                 ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": FAKE_TEXT[:10]}}),
                 ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": FAKE_TEXT[10:]}}),
                 ("contentBlockStop", {"contentBlockIndex": 1}),
                 ("messageStop", {"stopReason": "end_turn"})]


def event_message(kind: str, payload: dict, message_type: str = "event") -> bytes:
    """One event-stream message: lengths and their CRC32, string headers, a JSON payload, CRC32."""
    import binascii
    import json
    import struct
    type_header = ":exception-type" if message_type == "exception" else ":event-type"
    headers = b""
    for name, value in ((type_header, kind), (":message-type", message_type),
                        (":content-type", "application/json")):       # 7: a string header
        headers += struct.pack("!B", len(name)) + name.encode()
        headers += struct.pack("!BH", 7, len(value)) + value.encode()
    body = json.dumps(payload).encode()
    prelude = struct.pack("!II", 16 + len(headers) + len(body), len(headers))
    message = prelude + struct.pack("!I", binascii.crc32(prelude)) + headers + body
    return message + struct.pack("!I", binascii.crc32(message))


def check_stream(prompt: str, events=STREAM_EVENTS) -> tuple[list[str], list[str]]:
    """Stream one prompt through bedrock_generator(stream=True), botocore reading `events` (as
    bytes, from no network); return the request's parameter names and the pieces."""
    import io

    import urllib3
    from botocore.awsrequest import AWSResponse
    client, sent = generators.bedrock_client(BEDROCK_REGION), {}
    client.meta.events.register("before-parameter-build.bedrock-runtime.ConverseStream",
                                lambda params, **_: sent.update(params))
    raw = b"".join(event_message(*event) for event in events)
    reply = lambda request, **_: AWSResponse(request.url, 200, {}, urllib3.HTTPResponse(
        io.BytesIO(raw), preload_content=False))             # instead of sending the request
    client.meta.events.register("before-send.bedrock-runtime.ConverseStream", reply)
    with redirect_stderr(io.StringIO()):             # the "waiting for Bedrock" line: no wait here
        bedrock = generators.bedrock_generator(MODEL_ID, client=client, stream=True)
        pieces = list(bedrock.reply(prompt, None))
    return sorted(sent), pieces


def parse_args(argv=None):
    """No flags; --help says what the script does."""
    p = support.OneLineParser(description="Check the Bedrock request offline, against "
                                          "botocore's service model (takes no flags).")
    return p.parse_args(argv)


def run(args) -> int:
    """Run every check, print what each found, and return 0 only if all of them hold."""
    try:
        import boto3
        from botocore.exceptions import BotoCoreError
    except ImportError:
        raise RuntimeError("boto3 is not installed: run `.venv/bin/pip install boto3`") from None
    chunks = rag.build_chunks(rag.CORPUS)
    prompt = rag.build_prompt(QUESTION, [c for c in chunks if c["doc_id"] == "HR-01"])
    failures = []
    with dummy_aws_env():
        try:
            names, text = check_converse(prompt, [{"text": FAKE_TEXT}])
            complaint = check_wrong_name(prompt)
            kept = check_converse(prompt, [REASONING, {"text": FAKE_TEXT}])[1]
            stream_names, pieces = check_stream(prompt)
        except (RuntimeError, ValueError, AssertionError, BotoCoreError) as exc:
            raise RuntimeError(f"the stubbed call failed ({exc}); if botocore does not know a "
                               f"field, upgrade it: .venv/bin/pip install -U boto3") from None

    print(f"Request parameters valid for Converse: {names}")
    print(f"Function returned the text blocks of output.message.content -> {text!r}")
    print(f"boto3 {boto3.__version__}")
    if names != EXPECTED_PARAMS:
        failures.append(f"request parameters {names}, expected {EXPECTED_PARAMS}")
    if text != FAKE_TEXT:
        failures.append(f"returned {text!r}, expected the fake text")

    print(f"A wrong name (max_tokens for maxTokens) is refused before sending: "
          f"{'ParamValidationError: ' + complaint if complaint else 'NOT refused'}")
    if '"max_tokens"' not in complaint:
        failures.append("max_tokens was not rejected with ParamValidationError")

    print(f"A reasoning block before the text block is left out -> {kept!r}")
    if kept != FAKE_TEXT:
        failures.append(f"with a reasoning block the function returned {kept!r}")

    print(f"ConverseStream: request parameters valid {stream_names}; an event stream in AWS's "
          f"encoding, read by botocore, gives the text deltas only -> {pieces!r}")
    if stream_names != EXPECTED_PARAMS or pieces != [FAKE_TEXT[:10], FAKE_TEXT[10:]]:
        failures.append(f"ConverseStream sent {stream_names} and gave {pieces!r}")

    for failure in failures:
        print(f"FAILED: {failure}")
    if not failures:
        print("All checks hold. Nothing was sent to AWS and nothing was billed.")
    return 1 if failures else 0


main = support.main_for(run, parse_args)     # bad input: one line on stderr, exit status 1


if __name__ == "__main__":
    support.leave(main())
