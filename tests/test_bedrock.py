"""Bedrock without AWS: the request schema, the reply parsing and every failure a learner meets.

botocore's Stubber validates requests against the bedrock-runtime service model and answers
with our own replies; the retry test swaps in fake HTTP responses one layer lower, so
botocore's real retry loop runs. A socket guard fails any test that tries the network.
"""
import os
import socket
import subprocess
import sys
import time

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber

import rag_from_scratch as rag
import verify_bedrock_request as vbr
from ragkit import generators

# The lesson's defaults, read from its function signatures (one source of truth).
BEDROCK_REGION = rag.defaults(rag.generate_with_bedrock)["region"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
make_client = generators.bedrock_client        # the real one, kept before any test patches it
QUESTION = "How many vacation days do I get each year?"
CLI = ["--backend", "tfidf", "--generator", "bedrock", "--model-id", "x", "--question", QUESTION]   # the kit's Bedrock

# The error code, and words the learner must see to know what to do about it.
FAILURES = {
    "AccessDeniedException": ["access denied to model x", "Model access", "bedrock:InvokeModel"],
    "ValidationException": ["--model-id", "us-east-1"],
    "ResourceNotFoundException": ["model x was not found in us-east-1", "model catalog"],
    "ThrottlingException": ["throttling", "retry"],
    "ModelTimeoutException": ["took too long", "retry"],
    "ModelNotReadyException": ["not ready", "wait a minute"],
    "ServiceUnavailableException": ["unavailable", "another --region"],
    "InternalServerException": ["internal error", "AWS Health Dashboard"],
    "ModelErrorException": ["failed while answering", "another model"],
    "UnrecognizedClientException": ["does not recognise your access key", "aws configure"],
    "ExpiredTokenException": ["expired", "aws sso login"],
}


def generate(client=None, model_id="x"):
    """The command line's Bedrock path: the lesson's Converse call with deadline and advice."""
    return generators.bedrock_generator(model_id, "us-east-1", client=client).converse("prompt", rag.SYSTEM_PROMPT)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a test tried to reach the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture()
def no_aws(monkeypatch, tmp_path):
    """No AWS credentials anywhere: no env keys, empty config files, no metadata service."""
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    for name in ("credentials", "config"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture()
def dummy_aws(no_aws, monkeypatch):
    """Dummy credentials: enough to build and sign a request, never sent anywhere."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "TEST-NOT-A-REAL-KEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")


def client_error_stub(code, message="stubbed error"):
    """The lesson's client with a Stubber that answers the next converse call with `code`."""
    client = make_client("us-east-1")
    stubber = Stubber(client)
    stubber.add_client_error("converse", service_error_code=code, service_message=message,
                             http_status_code=429 if code == "ThrottlingException" else 400)
    stubber.activate()
    return client, stubber


def run_cli(capsys, argv):
    """Run the lesson CLI in-process; return (exit code, stdout, stderr)."""
    code = rag.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def throttled_http(client):
    """Answer every HTTP attempt with 429 ThrottlingException; return the list of attempts."""
    attempts = []

    class Body:
        def stream(self, **kwargs):
            yield b'{"message": "Too many requests, please wait before trying again."}'

    def respond(request, **kwargs):
        attempts.append(request.url)
        headers = {"x-amzn-ErrorType": "ThrottlingException", "Content-Type": "application/json"}
        return AWSResponse(request.url, 429, headers, Body())

    client.meta.events.register("before-send.bedrock-runtime.Converse", respond)
    return attempts


# ---------------------------------------------------------------------------
# verify_bedrock_request.py
# ---------------------------------------------------------------------------
def test_verify_script_prints_tutorial_lines_and_passes(dummy_aws, capsys):
    assert vbr.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        "Request parameters valid for Converse: ['inferenceConfig', 'messages', 'modelId', 'system']",
        "Function returned the text blocks of output.message.content -> "
        "'FAKE STUB TEXT - not produced by a model.'",
        f"boto3 {boto3.__version__}",
    ]
    assert 'ParamValidationError: Unknown parameter in inferenceConfig: "max_tokens"' in lines[3]
    assert lines[4].endswith("-> 'FAKE STUB TEXT - not produced by a model.'")
    assert not any(line.startswith("FAILED") for line in lines)


def test_verify_script_needs_no_credentials_and_restores_environment(no_aws, capsys):
    assert vbr.main([]) == 0
    assert "AWS_ACCESS_KEY_ID" not in os.environ     # its dummy key does not leak out
    assert os.environ["AWS_EC2_METADATA_DISABLED"] == "true"


def test_verify_script_runs_as_a_command_with_no_aws_setup(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    (tmp_path / "empty").write_text("")
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "empty"),
               AWS_CONFIG_FILE=str(tmp_path / "empty"))
    done = subprocess.run([sys.executable, "verify_bedrock_request.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith("['inferenceConfig', 'messages', 'modelId', 'system']")
    assert done.stderr == ""


def test_verify_script_fails_if_reasoning_text_leaks_into_the_answer(dummy_aws, capsys,
                                                                     monkeypatch):
    def first_block_only(prompt, system_prompt=rag.SYSTEM_PROMPT, model_id="", region="",
                         client=None):
        response = client.converse(
            modelId=model_id, system=[{"text": system_prompt}],
            messages=[{"role": "user", "content": [{"text": prompt}]}],
            inferenceConfig={"maxTokens": 300, "temperature": 0.0})
        block = response["output"]["message"]["content"][0]     # the naive reading
        return block.get("text") or block["reasoningContent"]["reasoningText"]["text"]

    monkeypatch.setattr(rag, "generate_with_bedrock", first_block_only)
    assert vbr.main([]) == 1
    out = capsys.readouterr().out
    assert "FAILED: with a reasoning block the function returned 'FAKE STUB REASONING" in out


def test_verify_script_fails_on_an_unexpected_request_parameter(dummy_aws, capsys, monkeypatch):
    def extra_parameter(prompt, system_prompt=rag.SYSTEM_PROMPT, model_id="", region="",
                        client=None):
        response = client.converse(
            modelId=model_id, system=[{"text": system_prompt}],
            messages=[{"role": "user", "content": [{"text": prompt}]}],
            inferenceConfig={"maxTokens": 300}, requestMetadata={"team": "hr"})
        return "".join(b["text"] for b in response["output"]["message"]["content"] if "text" in b)

    monkeypatch.setattr(rag, "generate_with_bedrock", extra_parameter)
    assert vbr.main([]) == 1
    assert "FAILED: request parameters ['inferenceConfig', 'messages', 'modelId', " \
           "'requestMetadata', 'system']" in capsys.readouterr().out


def test_verify_script_reports_a_reply_botocore_does_not_know_in_one_line(dummy_aws, capsys,
                                                                         monkeypatch):
    unknown_block = {"output": {"message": {"role": "assistant", "content": [{"thought": "?"}]}},
                     "stopReason": "end_turn", "metrics": {"latencyMs": 0},
                     "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}}
    monkeypatch.setattr(vbr, "fake_converse_response", lambda blocks: unknown_block)
    assert vbr.main([]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the stubbed call failed (Parameter validation failed: "
                          'Unknown parameter in output.message.content[0]: "thought"')
    assert err.count("\n") == 1 and ".venv/bin/pip install -U boto3" in err


def test_stubber_rejects_max_tokens_with_param_validation_error(dummy_aws):
    from botocore.exceptions import ParamValidationError
    client = generators.bedrock_client("us-east-1")
    with Stubber(client) as stubber:
        stubber.add_response("converse", vbr.fake_converse_response([{"text": "x"}]))
        with pytest.raises(ParamValidationError, match='Unknown parameter in inferenceConfig: "max_tokens"'):
            client.converse(modelId="x", messages=[{"role": "user", "content": [{"text": "hi"}]}],
                            inferenceConfig={"max_tokens": 300})


# ---------------------------------------------------------------------------
# Bedrock failures through generate_with_bedrock
# ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("code", list(FAILURES))
def test_generate_turns_each_bedrock_error_into_one_line_of_advice(dummy_aws, code):
    client, stubber = client_error_stub(code)
    with pytest.raises(RuntimeError) as err:
        generate(client)
    message = str(err.value)
    assert "\n" not in message
    for words in FAILURES[code]:
        assert words in message
    stubber.assert_no_pending_responses()       # the error reply really was the one used


def test_generate_reports_an_unlisted_error_code_with_its_message(dummy_aws):
    client, _ = client_error_stub("SomeNewException", "the model crashed")
    with pytest.raises(RuntimeError, match="^Bedrock returned SomeNewException: the model crashed$"):
        generate(client)


def test_generate_without_credentials_says_to_configure_them(no_aws):
    with pytest.raises(RuntimeError, match="^no AWS credentials found: run `aws configure`"):
        generate()


@pytest.mark.parametrize("profile, words", [("no-such-profile", "no-such-profile"), ("", "empty")])
def test_a_missing_or_empty_aws_profile_is_one_line_of_advice(no_aws, monkeypatch, profile, words):
    monkeypatch.setenv("AWS_PROFILE", profile)
    with pytest.raises(RuntimeError, match="AWS_PROFILE") as err:
        generate()
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_client_without_credentials_fails_at_signing_not_on_the_network(no_aws):
    client = boto3.Session(region_name="us-east-1").client("bedrock-runtime")
    with pytest.raises(RuntimeError, match="^no AWS credentials found"):
        generate(client)


def test_the_core_call_alone_sends_the_tutorials_request(dummy_aws):
    client = make_client("us-east-1")
    with Stubber(client) as stubber:
        stubber.add_response("converse", vbr.fake_converse_response([{"text": "ok"}]),
                             {"modelId": "x", "system": [{"text": rag.SYSTEM_PROMPT}],
                              "messages": [{"role": "user", "content": [{"text": "prompt"}]}],
                              "inferenceConfig": {"maxTokens": 300, "temperature": 0.0}})
        assert rag.generate_with_bedrock("prompt", model_id="x", client=client) == "ok"


# ---------------------------------------------------------------------------
# Throttling: botocore's standard retry mode, bounded
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("attempts", [1, 3])
def test_throttling_retries_are_bounded_by_the_client_config(dummy_aws, monkeypatch, attempts):
    sleeps = []
    monkeypatch.setattr(time, "sleep", sleeps.append)        # keep the backoff, skip the wait
    client = generators.bedrock_client("us-east-1", attempts=attempts)
    retries = client.meta.config.retries
    assert retries["mode"] == "standard"
    sent = throttled_http(client)
    with pytest.raises(RuntimeError, match="^Bedrock is throttling requests"):
        generate(client)
    assert len(sent) == retries["total_max_attempts"]        # then it stops
    assert len(sleeps) == len(sent) - 1                      # one backoff between tries
    assert all(0 <= s <= 20 for s in sleeps)                 # standard mode caps a backoff at 20 s


def test_throttling_message_counts_the_requests_really_sent(dummy_aws, monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)
    client = generators.bedrock_client("us-east-1", attempts=3)
    sent = throttled_http(client)
    with pytest.raises(RuntimeError) as err:
        generate(client)
    assert f"gave up after {len(sent)} attempts" in str(err.value)


# ---------------------------------------------------------------------------
# The same failures through the command line: one line on stderr, exit status 1
# ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("code", list(FAILURES))
def test_cli_prints_one_line_for_each_bedrock_error(dummy_aws, monkeypatch, capsys, code):
    stubs = []

    def stubbed_bedrock_client(region=BEDROCK_REGION, attempts=3):
        client, stubber = client_error_stub(code)
        stubs.append(stubber)
        return client

    monkeypatch.setattr(generators, "bedrock_client", stubbed_bedrock_client)
    status, out, err = run_cli(capsys, CLI)
    assert status == 1
    assert "HR-01#0   Annual leave policy" in out    # retrieval ran before generation failed
    waiting, error = err.splitlines()                  # says what it waits for, then one line
    assert waiting == "waiting for Amazon Bedrock in us-east-1 (up to 45 s) ..."
    assert error.startswith("error: ") and "Traceback" not in err
    for words in FAILURES[code]:
        assert words in err
    stubs[0].assert_no_pending_responses()


def test_cli_without_credentials_prints_one_line_and_exits_1(no_aws, capsys):
    status, out, err = run_cli(capsys, CLI)
    assert status == 1 and out == ""                   # it stops before any slow work
    assert err.startswith("error: no AWS credentials found") and err.count("\n") == 1
    assert "Traceback" not in err


def stub_replying(monkeypatch, text):
    """Bedrock's client with botocore's Stubber: one Converse reply holding `text`."""
    def stubbed_bedrock_client(region=BEDROCK_REGION, attempts=3):
        client = make_client(region, attempts)
        stubber = Stubber(client)
        stubber.add_response("converse", vbr.fake_converse_response([{"text": text}]))
        stubber.activate()
        return client
    monkeypatch.setattr(generators, "bedrock_client", stubbed_bedrock_client)


def test_cli_shows_a_stubbed_answer_with_its_checked_quote_and_source(dummy_aws, monkeypatch, capsys):
    """A quote is shown only with the number of the passage it is in (the check is "exact")."""
    import re
    quote = "Every full-time employee at Kestrelwood Systems receives 24 days of paid annual leave per calendar year."
    stub_replying(monkeypatch, f'Quote: "{quote}" [3]\nAnswer: 24 days a year.')   # [3]: the wrong number
    status, out, err = run_cli(capsys, CLI + ["--show-prompt"])
    assert status == 0, err
    answer = out.split("== Step 7: the answer (Amazon Bedrock, billed) ==\n")[1].splitlines()
    assert answer[:2] == ["I don't know based on these documents.",
                          "(checked: the model's quote of [3] is set aside: not in passage [3] (it is in "
                          "passage [1]); not shown)"]
    right = re.search(r'\[(\d)\] source="HR-01 > Annual leave policy"', out).group(1)
    stub_replying(monkeypatch, f'Quote: "{quote}" [{right}]\nAnswer: 24 days a year.')
    status, out, err = run_cli(capsys, CLI)
    answer = out.split("== Step 7: the answer (Amazon Bedrock, billed) ==\n")[1].splitlines()
    assert answer == ["24 days a year.", f'  "{quote}" [HR-01 > Annual leave policy]',
                      "sources: HR-01 > Annual leave policy"]


def test_cli_replaces_a_stubbed_answer_that_quotes_nothing_by_the_refusal(dummy_aws, monkeypatch, capsys):
    stub_replying(monkeypatch, vbr.FAKE_TEXT)
    status, out, err = run_cli(capsys, CLI)
    assert status == 0, err
    answer = out.split("== Step 7: the answer (Amazon Bedrock, billed) ==\n")[1].splitlines()
    assert answer[0] == "I don't know based on these documents." and vbr.FAKE_TEXT not in out
    assert answer[1].startswith("(checked: the model's answer quoted nothing found in the passages")

def test_the_lessons_generate_without_credentials_says_so_before_loading_anything(no_aws, capsys):
    import rag_from_scratch as rag
    status = rag.main(["--question", "Can I work from home on Wednesday?", "--generate", "--model-id", "x"])
    out, err = capsys.readouterr()
    assert status == 1 and out == ""                   # no chunk cut, no model loaded
    assert err.startswith("error: no AWS credentials found: run `aws configure`") and err.count("\n") == 1
