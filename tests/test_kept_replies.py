"""The development runs' kept replies (rageval/devset.py): a damaged file is one line naming the
file and the line, never a traceback deep in a check; a last line cut short by a kill is skipped."""
import json

import pytest

from rageval import devset


def write(tmp_path, *lines):
    path = tmp_path / "answers-model.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_kept_replies_are_read_and_a_last_line_cut_short_is_skipped(tmp_path):
    good = json.dumps({"key": "a", "reply": "Sentences: [1.1]\nAnswer: yes."})
    assert set(devset.read_kept(write(tmp_path, good, '{"key": "b", "rep'))) == {"a"}


@pytest.mark.parametrize("record, said", [
    ({"key": "a", "reply": 42}, 'line 1 is not a kept reply'),
    ({"key": "a", "reply": ["x"]}, 'line 1 is not a kept reply'),
    ({"key": ["a"], "reply": "x"}, 'line 1 is not a kept reply'),
    (["a", "x"], 'line 1 is not a kept reply'),
])
def test_a_record_that_is_no_reply_is_one_error_naming_the_file_and_line(tmp_path, record, said):
    path = write(tmp_path, json.dumps(record), json.dumps({"key": "b", "reply": "x"}))
    with pytest.raises(ValueError, match=said) as error:
        devset.read_kept(path)
    assert str(error.value).startswith(f"{path}: line 1 ")


def test_a_broken_line_before_the_last_and_an_oversized_line_are_named(tmp_path):
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        devset.read_kept(write(tmp_path, "{not json", json.dumps({"key": "b", "reply": "x"})))
    huge = json.dumps({"key": "c", "reply": "x" * (devset.MAX_KEPT_LINE + 1)})
    with pytest.raises(ValueError, match=r"line 2 is 1,048,\d+ characters, not a kept reply"):
        devset.read_kept(write(tmp_path, json.dumps({"key": "b", "reply": "x"}), huge))
