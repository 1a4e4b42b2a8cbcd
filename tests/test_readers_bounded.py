"""Hostile files against the --docs readers (ragkit/readers.py): each is read, or is one [skip]
line, in time that grows with its size and not with its square, and the note beside it still
reads. The files are ragbench/readers.py's shapes at a size a test can afford; the full sizes
are the benchmark's. CPU time is what is bounded: it does not grow when the machine is busy."""
import time
import tracemalloc
import warnings

import pytest

from ragbench import readers as bad
from ragkit import documents, readers

NOTE = bad.NOTE


def cpu(fn, *args):
    """(what fn(*args) returns, the CPU seconds it took)."""
    start = time.process_time()
    value = fn(*args)
    return value, time.process_time() - start


def folder_with(tmp_path, name, make, *args):
    """tmp_path holding the note and a bad file made by make(path, *args)."""
    (tmp_path / "note.md").write_text(NOTE, encoding="utf-8")
    make(tmp_path / name, *args)
    return tmp_path


def skipped(capsys) -> list[str]:
    """The [skip] lines the run printed."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("[skip]")]


# --- PDF ----------------------------------------------------------------------------------
def test_a_page_longer_than_max_page_chars_is_cut_there_and_says_so(tmp_path):
    total, pages = readers.read_pdf(bad.make_long_word_pdf(tmp_path / "word.pdf", chars=60_000))
    (text,) = [text for _, blocks in pages[0][1] for _, text in blocks]
    assert total == 1 and len(text) == 50_000 + len(" [... 10,000 more characters on this page]")
    assert text.endswith("a [... 10,000 more characters on this page]")


def test_hyphen_joining_never_backtracks_through_a_long_word():
    text = "a" * 30_000 + " The seal con\ufffe sists of two rings."      # the old pattern: 7 s
    words, seconds = cpu(readers.words_of, text)
    joined, more = cpu(readers.dehyphenate, text, words | {"consists"})
    assert joined.endswith(" The seal consists of two rings.") and "sists" not in words
    assert seconds + more < 1


def test_bookmarks_are_found_with_one_look_up_per_line():
    lines = [f"Line {n}: the valve is opened slowly." for n in range(1_000)]
    lines[500] = "4.2 Seal rings"
    marks = [(0, f"Section {n}") for n in range(999)] + [(1, "Seal rings")]     # the old way: 30 s
    (sections, path), seconds = cpu(readers.page_sections, lines, marks, ["Manual"])
    assert [(heading, len(text)) for heading, text in sections] == [
        ("Manual", 500), ("Section 998 > Seal rings", 499)]
    assert path == ["Section 998", "Seal rings"] and seconds < 1


def test_a_numbered_heading_line_meets_its_bookmark_as_before():
    lines = ["2 Related Work", "Text.", "A.1 Prompts", "More.", "3.1.2 Set-up", "Last."]
    marks = [(0, "Related Work"), (0, "Appendix"), (1, "Prompts"), (1, "Set-up")]
    assert readers.page_sections(lines, marks, [])[0] == [
        ("Related Work", ["Text."]), ("Appendix > Prompts", ["More."]), ("Appendix > Set-up", ["Last."])]


def test_a_flate_bomb_is_one_skip_line_and_the_note_beside_it_reads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(readers, "PDF_MEMORY", 64 << 20)      # the benchmark meets 384 MB
    folder = folder_with(tmp_path, "bomb.pdf", bad.make_flate_bomb_pdf, 6)
    assert [d["doc_id"] for d in documents.load_documents(folder)] == ["note.md"]
    assert skipped(capsys) == ["[skip] bomb.pdf: PDFium stopped on page 1: it needs more than the 64 MB "
                               "a PDF may use (a PDF bomb?), or is damaged (exit -6)"]


@pytest.mark.slow      # a second or more
def test_a_pdf_that_keeps_pdfium_busy_is_stopped_by_its_cpu_budget(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(readers, "PDF_SECONDS", 1)
    monkeypatch.setattr(readers, "PDF_MEMORY", 8 << 30)      # so that time runs out first
    folder = folder_with(tmp_path, "busy.pdf", bad.make_flate_bomb_pdf, 30)
    assert [d["doc_id"] for d in documents.load_documents(folder)] == ["note.md"]
    assert skipped(capsys) == ["[skip] busy.pdf: PDFium took too long on page 1 (1 s for the first page, "
                               "50 ms a page after it)"]


def test_pypdfium2s_own_messages_never_reach_the_terminal(tmp_path, capfd, caplog):
    folder = folder_with(tmp_path, "deep.pdf", bad.make_deep_outline_pdf, 1_000)
    docs = documents.load_documents(folder)
    assert [d["doc_id"] for d in docs] == ["deep.pdf p. 1", "note.md"]
    assert capfd.readouterr().err.splitlines() == ["read 2 files: 1 .md, 1 .pdf (1 pages)"]
    assert caplog.messages == []         # pytest takes log records from stderr: the old way, 985


# --- HTML ---------------------------------------------------------------------------------
@pytest.mark.parametrize("run", [" " * 30_000, " \t" * 15_000, "&#32;" * 30_000])
def test_a_run_of_spaces_costs_no_square_time(run):
    page = f"<title>Pump</title><body><p>pump{run}primed</p><pre>x{run}y\n</pre>".encode()  # old way: 10 s
    sections, seconds = cpu(readers.html_sections, page)
    spaces = run.replace("&#32;", " ")
    assert sections == [("Pump", [("text", "pump primed"), ("code", f"```\nx{spaces}y\n```")])]
    assert seconds < 1


def test_a_page_over_its_tag_or_text_budget_is_one_skip_line_before_it_is_parsed(tmp_path, monkeypatch,
                                                                                  capsys):
    monkeypatch.setattr(readers, "MAX_HTML_TAGS", 10_000)     # the benchmark meets 50,000
    monkeypatch.setattr(readers, "MAX_HTML_CHARS", 1_000_000)     # and 4 MB
    (tmp_path / "tags.html").write_text("<i>a</i>" * 6_000, encoding="utf-8")
    (tmp_path / "text.html").write_text("<p>" + "pump " * 300_000 + "</p>", encoding="utf-8")
    folder = folder_with(tmp_path, "script.html", bad.make_script_html, 2)    # scripts are not counted
    assert [d["doc_id"] for d in documents.load_documents(folder)] == ["note.md", "script.html"]
    assert skipped(capsys) == ["[skip] tags.html: 12,000 tags, over the 10,000 a page may hold",
                               "[skip] text.html: 1.5 MB of markup, over the 1 MB a page may hold"]


def test_tags_nested_deeper_than_max_html_depth_are_one_skip_line(tmp_path, capsys):
    folder = folder_with(tmp_path, "deep.html", bad.make_html, "<div>" * 101 + "pump")
    (tmp_path / "ok.html").write_text("<div>" * 99 + "pump", encoding="utf-8")
    assert [d["doc_id"] for d in documents.load_documents(folder)] == ["note.md", "ok.html"]
    assert skipped(capsys) == ["[skip] deep.html: tags nested more than 100 deep"]


def test_a_comment_left_open_builds_no_tree():
    page = ("<title>Pump</title><body><p>The pump.</p><!--" + "pump " * 2_000_000).encode()   # 10 MB
    tracemalloc.start()
    try:
        sections = readers.html_sections(page)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sections == [("Pump", [("text", "The pump.")])] and peak < 60e6    # the old way: 200 MB


def test_a_page_that_is_only_a_url_is_read_without_a_library_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert readers.html_sections(b"https://example.com/pump-manual") == [
            ("", [("text", "https://example.com/pump-manual")])]


@pytest.mark.slow
def test_empty_elements_and_dropped_tags_by_the_ten_thousand_cost_no_square_time():
    # 40,002 tags, under MAX_HTML_TAGS; at 30,000 each the old way took 10 s and minutes
    page = ("<p>" + "a<br>" * 20_000 + "</i>" * 20_000 + "</p>").encode()
    sections, seconds = cpu(readers.html_sections, page)
    assert sections == [("", [("text", "a" + " a" * 19_999)])] and seconds < 5
    page = ("<p>" + "a<button>x</button>" * 20_000 + "</p>").encode()
    sections, seconds = cpu(readers.html_sections, page)
    assert sections == [("", [("text", "a" * 20_000)])] and seconds < 5


# --- Word ---------------------------------------------------------------------------------
def test_a_docx_that_declares_entities_is_refused_before_mammoth_reads_it(tmp_path, capsys):
    folder = folder_with(tmp_path, "entities.docx", bad.make_entity_docx, 40_000)   # the old way: 2.3 s
    assert [d["doc_id"] for d in documents.load_documents(folder)] == ["note.md"]
    assert skipped(capsys) == ["[skip] entities.docx: its XML declares a DOCTYPE, which Word never writes "
                               "(an entity bomb?)"]


@pytest.mark.slow      # a second or more
def test_a_docx_over_its_paragraph_or_tag_budget_is_refused_and_its_neighbours_read(tmp_path, capsys):
    bad.make_paragraphs_docx(tmp_path / "empty.docx", 0.2, "")                # 33,333 paragraphs
    runs = b"<w:p>" + b"<w:r><w:t>a</w:t></w:r>" * 30 + b"</w:p>"
    bad.make_docx(tmp_path / "runs.docx", [runs * 1_000])                    # 122,000 tags
    folder = folder_with(tmp_path, "ok.docx", bad.make_paragraphs_docx, 0.05)
    docs = documents.load_documents(folder)
    assert [d["doc_id"] for d in docs] == ["note.md", "ok.docx"]
    assert skipped(capsys) == ["[skip] empty.docx: over 10,000 paragraphs, more than a .docx may hold",
                               "[skip] runs.docx: over 120,000 XML tags, more than a .docx may hold"]


@pytest.mark.slow
def test_a_docx_of_240_mb_of_paragraphs_is_refused_and_the_note_beside_it_reads(tmp_path, capsys):
    folder = folder_with(tmp_path, "big.docx", bad.make_paragraphs_docx, 240)   # the old way: MemoryError,
    assert [d["doc_id"] for d in documents.load_documents(folder)] == ["note.md"]   # and the note too
    assert skipped(capsys) == ["[skip] big.docx: over 10,000 paragraphs, more than a .docx may hold"]


# --- Notebooks ----------------------------------------------------------------------------
def test_a_notebook_over_its_cell_or_item_budget_is_refused_before_it_is_parsed(tmp_path, capsys):
    bad.make_cells_notebook(tmp_path / "cells.ipynb", 20_000)
    (tmp_path / "items.ipynb").write_text('{"cells": [], "metadata": {"x": [' + "0," * 1_000_001 + '0]}, '
                                          '"nbformat": 4, "nbformat_minor": 5}', encoding="utf-8")
    folder = folder_with(tmp_path, "log.ipynb", bad.make_long_line_notebook, 0.01)
    assert [d["doc_id"] for d in documents.load_documents(folder)] == ["log.ipynb", "note.md"]
    assert skipped(capsys) == ["[skip] cells.ipynb: over 10,000 cells, more than a notebook may hold",
                               "[skip] items.ipynb: over 1,000,000 JSON items, more than a notebook may hold"]


def test_a_line_of_a_cell_is_cut_at_max_line_chars_and_says_so(tmp_path):
    data = bad.make_long_line_notebook(tmp_path / "line.ipynb", 1).read_bytes()    # a 1 MB line
    (_, blocks), = readers.notebook_sections(data)
    line = "table = '" + "pump," * 200_000 + "'"
    assert blocks[1] == ("code", f"```python\n{line[:5_000]} [... 995,010 more characters]\n```")


def test_a_notebook_nbformat_would_spend_a_minute_validating_is_read_at_once(tmp_path):
    output = '{"output_type": "stream", "name": "stdout", "text": "6.1 bar"}'   # cells without ids
    data = ('{"cells": [{"cell_type": "code", "metadata": {}, "source": "read()", "outputs": ['
            + ", ".join([output] * 20_000) + ']}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    sections, seconds = cpu(readers.notebook_sections, data.encode())      # the old way: 20 s
    assert sections == [("", [("code", "```python\nread()\n```")])] and seconds < 2


# --- the folder's budget: bytes read in all, in path order ---------------------------------
def test_files_past_the_folder_budget_are_skipped_and_counted_in_one_line(tmp_path, capsys):
    for name in ["a.md", "b.md", "c.md", "d.md", "e.md"]:
        (tmp_path / name).write_text(f"# {name}\n\n" + "word " * 18)      # 100 bytes each
    (tmp_path / "big.md").write_bytes(b"x" * (documents.MAX_FILE_BYTES + 1))   # over its own cap
    (tmp_path / "video.mp4").write_bytes(b"\0" * 10_000)                 # no reader: not read
    docs = documents.load_documents(tmp_path, max_bytes=350)
    assert [d["doc_id"] for d in docs] == ["a.md", "b.md", "c.md"]
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "skipped 2 files past the 0.00035 MB folder budget (--max-folder-mb raises it)"
    assert "[skip] big.md: 2.0 MB is over the 2 MB limit for one file (split it)" in err


def test_a_budget_too_small_for_any_file_says_so_in_its_one_error(tmp_path):
    (tmp_path / "a.md").write_text("# a\n\n" + "word " * 18)
    with pytest.raises(ValueError, match=r"no readable .* 1 file past the 1e-05 MB folder budget "
                                         r"\(--max-folder-mb raises it\)"):
        documents.load_documents(tmp_path, max_bytes=10)


def test_max_folder_mb_is_the_budget_in_megabytes(tmp_path, capsys):
    from ragkit import cli
    for name in ["a.md", "b.md", "c.md"]:
        (tmp_path / name).write_text(f"# {name}\n\n" + "word " * 80_000)   # 400 KB each
    chosen = cli.check_args(cli.parse_args(["--docs", str(tmp_path), "--max-folder-mb", "1",
                                            "--backend", "tfidf"]))
    assert [d["doc_id"] for d in documents.load_folder(tmp_path, chosen.reading)] == ["a.md", "b.md"]
    assert capsys.readouterr().err.splitlines()[-1] == \
        "skipped 1 file past the 1 MB folder budget (--max-folder-mb raises it)"
