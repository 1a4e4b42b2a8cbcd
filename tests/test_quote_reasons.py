"""A model's quotes as a user meets them: the kit asks a fake OpenAI-compatible server on
127.0.0.1 (its reply canned) about the two notes the README's "Next" commands use, and prints
what its check decided, with the reason it decided on."""
from conftest import ROOT, chat_reply, serving

import rag_from_scratch as rag

QUESTION = "How do I restart the database?"


def answer(reply: str, capsys) -> str:
    """What the kit prints from the Step 7 heading on, the model replying `reply`."""
    with serving(lambda wfile, stop: wfile.write(chat_reply(reply)), content_type="application/json") as url:
        assert rag.main(["--docs", str(ROOT / "examples" / "notes"), "--backend", "tfidf", "--question", QUESTION,
                         "--generator", "openai", "--llm-url", url + "/v1"]) == 0
    return capsys.readouterr().out.split("== Step 7: the answer")[1]


def test_a_heading_quoted_is_set_aside_as_a_heading_never_as_not_in_the_passages(capsys):
    shown = answer('Quote: "Restarting the database" [1]\n'
                   'Answer: Run sudo systemctl restart postgresql on db01.', capsys)
    assert "(checked: the model's quote of [1] is set aside: a heading, not a sentence; not shown)" in shown
    assert "not in passage" not in shown and "I don't know based on these documents." in shown


def test_a_copy_that_drops_a_not_is_never_shown(capsys):
    shown = answer('Quote: "Do restart the database while the nightly backup runs (02:00 to 02:40)." [1]\n'
                   'Answer: Restart it while the backup runs.', capsys)
    assert "Do restart" not in shown and "while the backup runs" not in shown
    assert "(checked: the model's quote of [1] is set aside: not in passage [1]; not shown)" in shown


def test_a_true_quote_is_shown_with_its_source(capsys):
    shown = answer('Quote: "Restart PostgreSQL with `sudo systemctl restart postgresql` on `db01`." [1]\n'
                   'Answer: Run `sudo systemctl restart postgresql` on `db01` [1].', capsys)
    assert "sudo systemctl restart postgresql" in shown and "set aside" not in shown
    assert "sources: database.md > The database server > Restarting the database" in shown
