"""The tutorial's flags run the lesson's own functions, kit installed or not; only a flag beyond
the tutorial goes through main()'s one door to the kit (ragkit/cli.py)."""
import os
import shutil
import subprocess
import sys

import boto3
import pytest
from botocore.stub import Stubber

import rag_from_scratch as rag
import verify_bedrock_request as vbr
from conftest import ROOT

QUESTION = "Can I work from home on Wednesday?"
# Runs a script with the kit made unimportable, as in a folder that holds the lesson alone.
WITHOUT_KIT = ("import runpy, sys; sys.modules['ragkit'] = None; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')")


def run_lesson(cwd, *argv, kit=True):
    """`python rag_from_scratch.py ARGV` in cwd: (exit code, stdout, stderr)."""
    command = [sys.executable, "rag_from_scratch.py", *argv]
    if not kit:
        command = [sys.executable, "-c", WITHOUT_KIT, "rag_from_scratch.py", *argv]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": ""})
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow
def test_a_tutorial_question_prints_step_4s_prompt_the_same_with_the_kit_and_alone(tmp_path):
    shutil.copy(ROOT / "rag_from_scratch.py", tmp_path)
    argv = ["--backend", "tfidf", "--question", QUESTION]
    with_kit = run_lesson(ROOT, *argv)
    alone = run_lesson(tmp_path, *argv, kit=False)
    assert with_kit[0] == alone[0] == 0, with_kit[2] + alone[2]
    assert with_kit[1] == alone[1]
    prompt = with_kit[1].split("-- the prompt a model would read --\n")[1]
    assert prompt.startswith("Context:\n[HR-03] Hybrid and remote work\n")
    assert f"\n\nQuestion: {QUESTION}\nAnswer:\n" in prompt
    assert "<<BEGIN" not in with_kit[1]             # the kit's fenced prompt is not what runs


def test_a_flag_beyond_the_tutorial_needs_the_kit_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ragkit", None)          # as if the kit were not there
    assert rag.main(["--backend", "tfidf", "--docs", "notes/"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("error: --docs: flags beyond the tutorial need the kit (the ragkit "
                                 "folder beside this file)\n")


def test_the_tutorial_flags_never_import_the_kit(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ragkit", None)
    assert rag.main(["--backend", "tfidf", "--question", QUESTION, "--k", "2"]) == 0
    out = capsys.readouterr().out
    assert "== Your question (k=2) ==" in out and "Context:\n[HR-03]" in out


def test_k_above_the_samples_chunks_is_cut_to_their_number(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ragkit", None)
    assert rag.main(["--backend", "tfidf", "--question", QUESTION, "--k", "40"]) == 0
    assert "== Your question (k=17) ==" in capsys.readouterr().out


# --- Step 7: --generate sends the lesson's prompt and system prompt to Bedrock --------------
@pytest.fixture()
def bedrock_replies(monkeypatch):
    """replies(add): from then on boto3.client gives a real bedrock-runtime client whose
    Stubber (it checks each request against the service model) was given add(stubber)'s
    responses. Dummy keys sign the request; nothing is sent. The kit is made unimportable.
    Every response given must have been asked for by the end of the test."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "TEST-NOT-A-REAL-KEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.setitem(sys.modules, "ragkit", None)
    real_client, stubbers = boto3.client, []

    def replies(add):
        def client(service, **kwargs):
            made = real_client(service, **kwargs)
            stubbers.append(Stubber(made))
            add(stubbers[-1])
            stubbers[-1].activate()
            return made
        monkeypatch.setattr(boto3, "client", client)
    yield replies
    assert stubbers, "no Bedrock client was made"
    for stubber in stubbers:
        stubber.assert_no_pending_responses()


def expected_request(question: str) -> dict:
    """The Converse request the lesson builds for a question: Step 3's k=3 chunks, Step 4's prompt."""
    chunks = rag.build_chunks(rag.CORPUS)
    embedder = rag.Embedder("tfidf")
    index = rag.build_index(chunks, embedder)
    prompt = rag.rag_answer(question, index, chunks, embedder, k=3)["prompt"]
    return rag.converse_request(prompt, rag.SYSTEM_PROMPT, "m")


GENERATE = ["--backend", "tfidf", "--generate", "--model-id", "m", "--question"]


@pytest.mark.parametrize("question, reply", [
    (QUESTION, "No: Wednesday is the team anchor day [HR-03]."),
    (rag.UNANSWERABLE, "I don't know based on the company documents."),   # the exercise's refusal
])
def test_generate_sends_the_lessons_prompt_and_system_prompt(bedrock_replies, capsys, question, reply):
    request = expected_request(question)
    assert "reply exactly: \"I don't know based on the company documents.\"" in request["system"][0]["text"]
    assert request["messages"][0]["content"][0]["text"].startswith("Context:\n[")
    bedrock_replies(lambda stub: stub.add_response(
        "converse", vbr.fake_converse_response([{"text": reply}]), request))   # exactly this request
    assert rag.main(GENERATE + [question]) == 0
    out, err = capsys.readouterr()
    assert out.endswith(f"== Step 7: the answer (Amazon Bedrock, billed) ==\n{reply}\n")
    assert err == "asking Amazon Bedrock (m in us-east-1; at most about 2 minutes) ...\n"


def test_generate_turns_a_bedrock_error_into_one_line(bedrock_replies, capsys):
    bedrock_replies(lambda stub: stub.add_client_error("converse", "AccessDeniedException", "no access to m"))
    assert rag.main(GENERATE + [QUESTION]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "Traceback" not in "".join(err)
    assert err[1].startswith("error: AccessDeniedException: An error occurred (AccessDeniedException)")
    assert err[1].endswith("no access to m")


def test_generate_without_credentials_is_one_line(monkeypatch, tmp_path, capsys):
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for name in ("credentials", "config"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)     # no keys an earlier test left cached
    monkeypatch.setitem(sys.modules, "ragkit", None)
    assert rag.main(GENERATE + [QUESTION]) == 1
    assert capsys.readouterr().err.splitlines()[-1].startswith("error: no AWS credentials found: run `aws configure`")
