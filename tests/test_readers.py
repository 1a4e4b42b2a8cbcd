"""--docs beyond Markdown: PDF, HTML, .docx and notebooks read as sections (ragkit/readers.py),
every run saying what it read and what it skipped, bad files one line each, and the real
files nobody here wrote: two research papers, a saved web page, a page MkDocs built."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT

import rag_from_scratch as rag
from ragbench import readers as bad
from rageval import downloads
from ragkit import chunking, documents, readers

FETCH = "the readers' real files are missing: run `python -m rageval.downloads`"
PAPERS = downloads.folder("readers/paper-qa")
FES = downloads.folder("readers/grobid") / "0046d83a-edd6-4631-b57c-755cdcce8b7f.pdf"
NOTE = "# Pump notes\n\nThe P-200 pump is primed with water before its first start.\n"


def fetched():
    """Skip, naming the command, unless the fetched papers and pages are here."""
    if not (FES.is_file() and (PAPERS / "pasa.pdf").is_file()):
        pytest.skip(FETCH)


def manual_pdf(path, pages=None):
    """A four-page manual (fpdf2) with a running header and footer, bookmarks, and a word
    hyphenated across two lines."""
    from fpdf import FPDF

    class Manual(FPDF):
        def header(self):
            self.set_font("helvetica", size=9)
            self.cell(0, 8, "ACME P-200 pump manual, revision 7", new_x="LMARGIN", new_y="NEXT")

        def footer(self):
            self.set_y(-15)
            self.set_font("helvetica", size=9)
            self.cell(0, 8, f"Page {self.page_no()} of 4")
    pdf = Manual()
    for title, body in pages or MANUAL:
        pdf.add_page()
        pdf.start_section(title, level=0)
        pdf.set_font("helvetica", "B", 14)
        pdf.cell(0, 10, title, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("helvetica", size=11)
        pdf.multi_cell(0, 6, body)
    pdf.output(str(path))
    return path


MANUAL = [("Installation", "Bolt the pump to a level floor. The inlet must face the tank."),
          ("Priming", "Fill the chamber with water before the first start, or the seal runs dry and "
                      "is des-\ntroyed within minutes."),
          ("Maintenance", "Replace the mechanical seal every 4,000 running hours."),
          ("Troubleshooting", "A humming pump with no flow has a blocked inlet.")]


def field_guide_docx(path):
    """A .docx made with python-docx: a title, headings, a list, a table and a code paragraph."""
    import docx
    d = docx.Document()
    d.add_heading("Field guide", 0)
    d.add_heading("Setting up the pump", 1)
    d.add_paragraph("Open valve B before the pump is switched on.")
    d.add_paragraph("Check the seal", style="List Bullet")
    d.add_paragraph("Fill the chamber", style="List Bullet")
    d.add_heading("Pressure limits", 2)
    table = d.add_table(rows=3, cols=2)
    for i, row in enumerate([("Model", "Max bar"), ("P-100", "6"), ("P-200", "9")]):
        for j, value in enumerate(row):
            table.cell(i, j).text = value
    d.styles.add_style("Code", 1)
    d.add_paragraph("pump --prime --valve B", style="Code")
    d.save(path)
    return path


def pump_notebook(path, output="pressure: 6.1 bar"):
    """A notebook (nbformat): a Markdown cell with headings, a code cell and its output."""
    import nbformat
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"language": "python", "name": "python3",
                                                                  "display_name": "Python 3"}})
    cell = nbformat.v4.new_code_cell("pressure = read_gauge('P-200')\nprint(pressure)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
    nb.cells = [nbformat.v4.new_markdown_cell("# Pressure log\n\n## Reading the gauge\n\nThe gauge "
                                              "is read every morning at eight."), cell]
    path.write_text(nbformat.writes(nb), encoding="utf-8")
    return path


def sections_of(docs, doc_id):
    """{heading: blocks} of one document."""
    return dict(next(d for d in docs if d["doc_id"] == doc_id)["sections"])


# --- PDF ----------------------------------------------------------------------------------
@pytest.mark.slow      # a second or more
def test_a_pdf_is_read_page_by_page_with_bookmarked_headings_and_no_running_header(tmp_path, capsys):
    manual_pdf(tmp_path / "manual.pdf")
    docs = documents.load_documents(tmp_path)
    assert [d["doc_id"] for d in docs] == [f"manual.pdf p. {n}" for n in range(1, 5)]
    assert docs[1]["sections"] == [("Priming", [("text", "Fill the chamber with water before the first "
                                                         "start, or the seal runs dry and is destroyed "
                                                         "within minutes.")])]
    assert not any("ACME" in d["text"] or "Page 2 of 4" in d["text"] for d in docs)
    assert "read 1 files: 1 .pdf (4 pages)" in capsys.readouterr().err
    chunks = chunking.document_chunks(docs)
    assert chunks[2]["title"] == "manual.pdf p. 3 > Maintenance" and chunks[2]["doc_id"] == "manual.pdf p. 3"


def test_a_two_page_pdfs_running_header_reaches_no_chunk(tmp_path):
    """A two-page leaflet: its header and footer are on both pages, so they go."""
    manual_pdf(tmp_path / "leaflet.pdf", MANUAL[:2])
    chunks = chunking.document_chunks(documents.load_documents(tmp_path))
    assert [c["doc_id"] for c in chunks] == ["leaflet.pdf p. 1", "leaflet.pdf p. 2"]
    assert not any("ACME" in c["text"] or "Page " in c["text"] for c in chunks)


def test_a_hyphen_that_ended_a_line_is_joined_unless_the_document_writes_a_compound():
    words = {"pulse", "width", "value", "consists", "of", "two"}
    assert readers.dehyphenate("con\ufffesists of two", words) == "consists of two"
    assert readers.dehyphenate("This pulse\ufffewidth value", words) == "This pulse-width value"
    assert readers.dehyphenate("re\ufffeduce it", words) == "reduce it"     # 're', 'duce': no words


def test_running_headers_go_but_pages_that_differ_only_in_numbers_keep_their_text():
    words = ["valve", "seal", "gauge", "inlet", "motor"]
    pages = [[f"De Marchis et al. (2016) 13:22 Page {n} of 5", *(f"The {w} of page {n} is {v}." for v in words
                                                              for w in [words[n - 1]]), str(n)]
             for n in range(1, 6)]
    assert readers.without_margins(pages)[2] == [f"The gauge of page 3 is {v}." for v in words]
    kept = readers.without_margins([["Valve 1 is checked."], ["Valve 2 is checked."], ["Valve 3 is checked."]])
    assert kept == [["Valve 1 is checked."], ["Valve 2 is checked."], ["Valve 3 is checked."]]


def test_locked_damaged_and_scanned_pdfs_are_one_line_each_and_the_run_goes_on(tmp_path, capsys):
    (tmp_path / "note.md").write_text(NOTE, encoding="utf-8")
    bad.make_pdf(tmp_path / "locked.pdf", ["The locked page."], password="secret")
    bad.make_damaged_pdf(tmp_path / "damaged.pdf")
    bad.make_scan_pdf(tmp_path / "scan.pdf")
    docs = documents.load_documents(tmp_path)
    assert [d["doc_id"] for d in docs] == ["note.md"]
    err = capsys.readouterr().err.splitlines()
    assert "[skip] locked.pdf: encrypted: it needs a password (save a copy without one)" in err
    assert "[skip] scan.pdf: no text layer: needs OCR" in err
    assert any(line.startswith("[skip] damaged.pdf: damaged or not a PDF (") for line in err)
    assert "read 1 files: 1 .md" in err
    assert next(line for line in err if line.startswith("skipped 3: ")) == (
        "skipped 3: damaged.pdf (damaged or not a PDF (Failed to load document (PDFium: Data format "
        "error).)), locked.pdf (encrypted: it needs a password (save a copy without one)), "
        "scan.pdf (no text layer: needs OCR)")


def test_a_long_pdf_shows_its_progress_and_stops_at_max_pages(tmp_path, capsys):
    bad.make_long_pdf(tmp_path / "long.pdf", pages=130)
    docs = documents.load_documents(tmp_path, max_pages=120)
    assert len(docs) == 120 and docs[-1]["doc_id"] == "long.pdf p. 120"
    assert "Valve 120 is checked every 1 months" in docs[-1]["text"]
    err = capsys.readouterr().err
    assert "reading long.pdf: 120 pages ..." in err
    assert "[info] long.pdf: read the first 120 of its 130 pages (--max-pages N reads more)" in err


def test_two_column_papers_read_column_by_column_with_their_hyphens_joined():
    fetched()
    sentences = {  # read off the rendered pages: the left column's end, the right's, broken words
        (FES, 3): ["The correct positioning was supported by palpation during targeted movements [29].",
                   "This template of hand openings was used as a reference for both the evaluation of "
                   "the behavioral outcome of FES and for post-hoc data analysis.",
                   "This pulse-width value was chosen after a pilot study in order to reduce "
                   "inter-subject variability of the threshold and stabilize the current values [18]."],
        (PAPERS / "pasa.pdf", 2): [
            "As illustrated in Figure 1, PaSa consists of two LLM agents: the Crawler and the Selector.",
            "Fortunately, human scientists have already created a vast amount of high-quality academic "
            "papers, which contain extensive surveys on a wide range of research topics.",
            "Specifically, for AutoScholarQuery test set, PaSa-7b achieves a 34.05% improvement in "
            "Recall@20 and a 39.36% improvement in Recall@50 compared to Google with GPT-4o, the "
            "strongest Google-based baseline."]}
    for (path, number), expected in sentences.items():
        total, pages = readers.read_pdf(path)
        text = " ".join(text for _, blocks in dict(pages)[number] for _, text in blocks)
        assert [s for s in expected if s not in text] == []
        assert "Page 3 of 9" not in text and "Journal of NeuroEngineering" not in text


# --- HTML ---------------------------------------------------------------------------------
PAGE = """<!doctype html><html><head><title>Pump care - ACME docs</title>
<style>.nav { color: red }</style><script>var tracker = "page-view";</script></head>
<body><header><a href="/">ACME docs home</a></header>
<nav><ul><li><a href="/a">Other page in the menu</a></li></ul></nav>
<div id="cookie-banner">We use cookies. Accept all?</div>
<main><h1>Pump care<a class="headerlink" href="#pump-care">¶</a></h1>
<p>Prime the <em>pump</em> before its first start.</p>
<svg><text>chart label</text></svg>
<h2>Parts</h2><ul><li>Seal</li><li>Impeller</li></ul>
<table><tr><th>Model</th><th>Max bar</th></tr><tr><td>P-200</td><td>9</td></tr></table>
<div class="highlight-bash"><pre>pump --prime
pump --start</pre></div>
<footer>Built with a generator</footer></main>
<aside>Related: sidebar links</aside><footer>Copyright ACME</footer></body></html>"""


def test_html_keeps_the_main_contents_structure_and_drops_everything_around_it():
    sections = readers.html_sections(PAGE.encode())
    assert sections == [
        ("Pump care", [("text", "Prime the pump before its first start.")]),
        ("Pump care > Parts", [("list", "- Seal\n- Impeller"),
                               ("table", "| Model | Max bar |\n| P-200 | 9 |"),
                               ("code", "```bash\npump --prime\npump --start\n```")])]
    text = json.dumps(readers.html_markdown(PAGE))
    for gone in ("ACME docs home", "Other page", "cookies", "tracker", "color: red", "chart label",
                 "Built with", "sidebar", "Copyright", "¶"):
        assert gone not in text


def test_a_page_without_a_heading_of_its_own_is_headed_by_its_title():
    page = b"<html><head><title>Release notes</title></head><body><p>Version 2 is out.</p></body></html>"
    assert readers.html_sections(page) == [("Release notes", [("text", "Version 2 is out.")])]


def test_a_fifty_megabyte_inline_script_costs_nothing_but_its_reading(tmp_path):
    bad.make_script_html(tmp_path / "script.html", megabytes=5)    # the benchmark reads 50 MB
    (doc,) = documents.load_documents(tmp_path)
    assert doc["sections"] == [("Pump page", [("text", "The P-200 pump holds 6 bar.")])]


@pytest.mark.slow
def test_a_page_mkdocs_built_keeps_its_code_and_none_of_the_themes_navigation(tmp_path):
    site = mkdocs_site(tmp_path)
    page = (site / "getting-started" / "index.html").read_bytes()
    sections = readers.html_sections(page)
    code = [text for _, blocks in sections for kind, text in blocks if kind == "code"]
    source = (ROOT / "data/devsets/mkdocs/docs/getting-started.md").read_text(encoding="utf-8")
    fences = [block.split("\n", 1)[1] for block in source.split("```")[1::2]]
    assert len(code) == len(fences) and all(f.strip() in c for f, c in zip(fences, code))
    assert sections[0][0] == "Getting Started with MkDocs"
    chrome = theme_strings(page)
    assert len(chrome) > 20 and "Keyboard Shortcuts" in chrome      # the theme's menus, as found
    text = " ".join(json.dumps(sections, ensure_ascii=False).split())
    assert [s for s in chrome if s in text] == []


def theme_strings(page: bytes) -> list[str]:
    """What a page shows outside its main part (menus, search box, footer) and never inside it,
    and the text of its scripts and styles: nothing of it may reach a chunk."""
    from bs4 import BeautifulSoup
    soup = BeautifulSoup(page, "html.parser")
    main = soup.find(attrs={"role": "main"})
    inside = " ".join(main.get_text(" ").split())
    found = []
    for string in soup.find_all(string=True):
        text = " ".join(string.split())
        code = string.parent.name in ("script", "style")
        if len(text.split()) >= 2 and (code or (main not in string.parents and text not in inside)):
            found.append(text[:60])
    return found


def mkdocs_site(tmp_path):
    """MkDocs' own documentation (carried in data/devsets/mkdocs), built by MkDocs' default theme."""
    import shutil
    shutil.copytree(ROOT / "data/devsets/mkdocs/docs", tmp_path / "src" / "docs")
    (tmp_path / "src" / "mkdocs.yml").write_text(
        "site_name: MkDocs\nmarkdown_extensions:\n  - admonition\n  - toc:\n      permalink: true\n",
        encoding="utf-8")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(tmp_path / "site")],
                   cwd=tmp_path / "src", check=True, capture_output=True, timeout=300)
    return tmp_path / "site"


def test_a_saved_wikipedia_page_gives_its_article_and_none_of_its_menus():
    fetched()
    sections = readers.html_sections((PAPERS / "flag_day.html").read_bytes())
    text = json.dumps(sections)
    assert sections[0][0] == "National Flag of Canada Day" and "instituted in 1996" in text
    for menu in ("Jump to content", "Main menu", "Privacy policy", "Create account", "Edit links",
                 "[edit]", "languages", "Retrieved from", "mw-"):
        assert menu not in text


# --- Word and notebooks ---------------------------------------------------------------------
@pytest.mark.slow      # a second or more
def test_a_docx_gives_headings_by_style_lists_tables_and_code(tmp_path):
    sections = readers.docx_sections(field_guide_docx(tmp_path / "guide.docx"))
    assert sections == [
        ("Field guide > Setting up the pump", [("text", "Open valve B before the pump is switched on."),
                                               ("list", "- Check the seal\n- Fill the chamber")]),
        ("Field guide > Setting up the pump > Pressure limits",
         [("table", "| Model | Max bar |\n| P-100 | 6 |\n| P-200 | 9 |"),
          ("code", "```\npump --prime --valve B\n```")])]


def test_a_docx_that_unpacks_past_the_cap_is_refused_before_it_is_unpacked(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(readers, "MAX_UNPACKED", 10_000_000)     # the benchmark unpacks 1 GB
    bad.make_zip_bomb_docx(tmp_path / "bomb.docx", megabytes=20)
    (tmp_path / "wrong.docx").write_bytes(b"PK\x03\x04 not a zip after all")
    (tmp_path / "note.md").write_text(NOTE, encoding="utf-8")
    assert [d["doc_id"] for d in documents.load_documents(tmp_path)] == ["note.md"]
    err = capsys.readouterr().err
    assert "[skip] bomb.docx: it unpacks to 21 MB, over the 10 MB limit for a .docx (a zip bomb?)" in err
    assert "[skip] wrong.docx: damaged or not a .docx (File is not a zip file)" in err


def test_a_notebook_gives_markdown_as_prose_and_code_as_code_and_outputs_only_when_asked(tmp_path):
    data = pump_notebook(tmp_path / "log.ipynb").read_bytes()
    code = "```python\npressure = read_gauge('P-200')\nprint(pressure)\n```"
    assert readers.notebook_sections(data) == [
        ("Pressure log > Reading the gauge", [("text", "The gauge is read every morning at eight."),
                                              ("code", code)])]
    with_outputs = readers.notebook_sections(data, outputs=True)
    assert with_outputs[0][1][2] == ("code", "```text\npressure: 6.1 bar\n```")


def test_a_long_output_is_cut_and_says_so_and_a_broken_notebook_is_one_line(tmp_path, capsys):
    data = pump_notebook(tmp_path / "log.ipynb", output="x" * 5000).read_bytes()
    output = readers.notebook_sections(data, outputs=True)[0][1][2][1]
    assert output.endswith("x\n[... 3,000 more characters]\n```")
    (tmp_path / "broken.ipynb").write_text('{"cells": [', encoding="utf-8")
    assert [d["doc_id"] for d in documents.load_documents(tmp_path)] == ["log.ipynb"]
    assert "[skip] broken.ipynb: not a Jupyter notebook (" in capsys.readouterr().err


def test_a_notebook_of_outputs_is_read_for_its_cells(tmp_path):
    bad.make_outputs_notebook(tmp_path / "plots.ipynb", megabytes=5)     # the benchmark: 100 MB
    (doc,) = documents.load_documents(tmp_path)
    assert "plot_pressure(day=19)" in doc["text"] and "iVBOR" not in doc["text"]


# --- A folder of everything ---------------------------------------------------------------
def test_a_folder_says_what_it_read_by_type_and_names_every_file_it_skipped(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "pump.md").write_text(NOTE, encoding="utf-8")
    manual_pdf(tmp_path / "manual.pdf")
    (tmp_path / "page.html").write_text(PAGE, encoding="utf-8")
    field_guide_docx(tmp_path / "guide.docx")
    pump_notebook(tmp_path / "log.ipynb")
    bad.make_scan_pdf(tmp_path / "scan.pdf")
    (tmp_path / "slides.pptx").write_bytes(b"PK\x03\x04")
    docs = documents.load_documents(tmp_path)
    assert len(docs) == 4 + 4
    err = capsys.readouterr().err.splitlines()
    assert "read 5 files: 1 .docx, 1 .html, 1 .ipynb, 1 .md, 1 .pdf (4 pages)" in err
    assert "skipped 2: scan.pdf (no text layer: needs OCR), slides.pptx (no reader)" in err


HIDE = """
import json, sys
for name in ("pypdfium2", "bs4", "markdownify", "mammoth", "nbformat"):
    sys.modules[name] = None                      # as if the extras were not installed
from ragkit import documents
print(json.dumps(documents.load_documents(sys.argv[1])))
"""


def test_without_the_extras_markdown_reads_as_before_and_the_rest_is_named_with_its_install(tmp_path):
    (tmp_path / "pump.md").write_text(NOTE, encoding="utf-8")
    (tmp_path / "care.txt").write_text("Drain the pump before frost.", encoding="utf-8")
    manual_pdf(tmp_path / "manual.pdf")
    (tmp_path / "page.html").write_text(PAGE, encoding="utf-8")
    (tmp_path / "guide.docx").write_bytes(b"PK")
    (tmp_path / "log.ipynb").write_text("{}", encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", HIDE, str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    notes = [{k: d[k] for k in ("doc_id", "file", "title", "text", "tags")} for d in documents.load_documents(tmp_path)
             if d["doc_id"] in ("pump.md", "care.txt")]
    assert json.loads(done.stdout) == notes
    err = done.stderr.splitlines()
    assert "[skip] 1 file needs pypdfium2: manual.pdf (.venv/bin/pip install pypdfium2)" in err
    assert "[skip] 1 file needs beautifulsoup4 markdownify: page.html (.venv/bin/pip install beautifulsoup4 markdownify)" in err
    assert ("[skip] 1 file needs mammoth beautifulsoup4 markdownify: guide.docx "
            "(.venv/bin/pip install mammoth beautifulsoup4 markdownify)") in err
    assert "[skip] 1 file needs nbformat: log.ipynb (.venv/bin/pip install nbformat)" in err
    assert "read 2 files: 1 .md, 1 .txt" in err
    for note in ("pump.md", "care.txt", "page.html", "guide.docx", "log.ipynb"):
        (tmp_path / note).unlink()
    done = subprocess.run([sys.executable, "-c", HIDE, str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 1 and done.stderr.splitlines()[-1].endswith(
        "; 1 file needs pypdfium2 (.venv/bin/pip install pypdfium2)")


def test_the_command_line_reads_notebook_outputs_and_pdf_pages_as_asked(tmp_path, capsys):
    pump_notebook(tmp_path / "log.ipynb")
    bad.make_long_pdf(tmp_path / "long.pdf", pages=3)
    bad.make_pdf(tmp_path / "mixed.pdf", ["The first page has text.", ""])
    ask = ["--docs", str(tmp_path), "--backend", "tfidf", "--question", "What pressure did the gauge show?"]
    assert rag.main(ask + ["--max-pages", "2"]) == 0
    out, err = capsys.readouterr()
    assert "6.1 bar" not in out and "long.pdf p. 3" not in out
    assert "[info] long.pdf: read the first 2 of its 3 pages (--max-pages N reads more)" in err
    assert "[info] mixed.pdf: 1 of its pages have no text (scanned pages need OCR)" in err
    assert rag.main(ask + ["--notebook-outputs", "--k", "1"]) == 0
    assert "pressure: 6.1 bar" in capsys.readouterr().out
    assert rag.main(ask + ["--source", "long.pdf", "--k", "2"]) == 0
    found = capsys.readouterr().out.split("== Your question")[1].split("-- the prompt")[0]
    assert found.count("long.pdf p. ") == 2                    # --source names the PDF: its pages
    assert "log.ipynb" not in found and "mixed.pdf" not in found


# --- Real papers: pages retrieved and cited, the saved index updated per file --------------
QUESTIONS = [  # (question, relevant: a page, pages or a whole file, the page an answer cites)
    ("At what rate were the EMG signals sampled?", ["fes.pdf p. 3"]),
    ("How many people took part in the hand opening study, and how old were they?", ["fes.pdf p. 2"]),
    ("Which base model were the Crawler and Selector of PaSa trained from?", ["pasa.pdf p. 7"]),
    ("How many real-world queries are in RealScholarQuery?", ["pasa.pdf p. 2", "pasa.pdf p. 4"]),
    ("What learning rate was used for the Crawler's imitation learning?", ["pasa.pdf p. 7"]),
    ("Where was the electrode array placed for the stimulation?", ["fes.pdf"]),
]


def everything_folder(tmp_path):
    """Notes, two real papers, a page MkDocs built, a .docx, a notebook, a scan and a .pptx."""
    import shutil
    folder = tmp_path / "docs"
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "pump.md").write_text(NOTE, encoding="utf-8")
    shutil.copy(FES, folder / "fes.pdf")
    shutil.copy(PAPERS / "pasa.pdf", folder / "pasa.pdf")
    shutil.copy(mkdocs_site(tmp_path) / "getting-started" / "index.html", folder / "getting-started.html")
    field_guide_docx(folder / "guide.docx")
    pump_notebook(folder / "log.ipynb")
    bad.make_scan_pdf(folder / "scan.pdf")
    shutil.copy(PAPERS / "dummy.pptx", folder / "slides.pptx")
    manual_pdf(folder / "manual.pdf")
    return folder


@pytest.mark.slow
def test_a_folder_of_every_kind_answers_from_the_right_pdf_page_and_updates_one_file(tmp_path, capsys):
    fetched()
    folder = everything_folder(tmp_path)
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps({"question": q, "relevant": r}) + "\n" for q, r in QUESTIONS))
    args = ["--docs", str(folder), "--backend", "minilm", "--index", str(tmp_path / "index")]
    assert rag.main(args + ["--eval", str(qa), "--k", "3"]) == 0
    out, err = capsys.readouterr()
    assert "read 7 files: 1 .docx, 1 .html, 1 .ipynb, 1 .md, 3 .pdf (28 pages)" in err
    assert "skipped 2: scan.pdf (no text layer: needs OCR), slides.pptx (no reader)" in err
    # the --docs retrieval (hybrid and context) finds the right page of every question at k=3
    block = out.split("6 questions): hybrid 0.3 + context, the retrieval --question uses ==\n")[1]
    assert "\nk=3: hit_rate=1.00" in block
    chunks = json.loads((tmp_path / "index" / "chunks.json").read_text())
    html = " ".join(" ".join(c["text"] for c in chunks if c["doc_id"] == "getting-started.html").split())
    chrome = theme_strings((folder / "getting-started.html").read_bytes())
    assert "Getting Started with MkDocs" in html and [s for s in chrome if s in html] == []
    assert rag.main(args + ["--question", QUESTIONS[0][0], "--generator", "extractive", "--k", "3"]) == 0
    answer = capsys.readouterr().out.split("== Step 7: the answer")[-1]
    assert "5000 Hz" in answer and "[fes.pdf p. 3 > Methods > Experimental setup" in answer
    manual_pdf(folder / "manual.pdf", MANUAL[:3] + [("Troubleshooting", "A pump that hums has a blocked inlet.")])
    assert rag.main(args) == 0
    assert "updated the index: 1 file changed or removed, 1 chunk embedded" in capsys.readouterr().out
