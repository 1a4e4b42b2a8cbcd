"""The Markdown reader (ragkit/readers.py) and front matter: headings and code as CommonMark
reads them, and what documentation sites add (attribute lists, admonitions, tabs, HTML, macros)
read as plain structure."""
from test_docs import SETUP_MD

from ragkit import documents, readers


def test_markdown_sections_follow_headings_but_not_code_fences():
    sections = readers.read_markdown(documents.split_front_matter(SETUP_MD)[1])
    assert [h for h, _ in sections] == ["Handbook", "Handbook > Databases",
                                        "Handbook > Databases > Backups", "Handbook > Coffee"]
    databases = dict(sections)["Handbook > Databases"]
    assert databases[1] == ("code", "```bash\n# restart the database (a comment in a code fence, "
                                    "not a heading)\nsudo systemctl restart reporting-db\n```")


def test_tilde_fences_and_unclosed_front_matter():
    text = "# A\nx\n~~~\n# not a heading\n~~~\n## B\ny"
    assert [h for h, _ in readers.read_markdown(text)] == ["A", "A > B"]
    assert documents.split_front_matter("---\nno closing line\n# Title") == (
        [], "---\nno closing line\n# Title")


def test_a_longer_fence_is_not_closed_by_a_shorter_one_inside_it():
    text = "# A\n\n````md\n```\n# not a heading\n```\n````\n\n## B\nbody\n"
    assert [h for h, _ in readers.read_markdown(text)] == ["A", "A > B"]


# --- Markdown read as structure: what documentation sites write --------------------------
SITE_MD = '''Install { #install }
=======

Run the installer once. It writes the config file.

Upgrading {: .note }
---------

!!! warning "Pin the version"
    Versions before 2.1 break the loader.

    ```python
    # a comment, not a heading
    import fastlib
    ```

/// tip | Faster builds
Use the cache.
///

=== "Linux"
    Use the package manager.

<div class="grid" markdown>
Read the <b>release notes</b> first. See [the notes](notes.md#top).
</div>

<!-- a comment
   across lines -->
{* ../../docs_src/app/main.py hl[3] *}
{% include "snippet.md" %}

| flag | default |
|------|---------|
| `--port` | 8080 |
| badge | [![CI](https://ci.example/badge.svg){ loading=lazy .off-glb }](https://ci.example) [tar](https://w.example/Tar(computing)) |

~~~~text
```
not a fence end
```
~~~~
'''


def test_hostile_markdown_reads_as_plain_structure():
    sections = readers.read_markdown(SITE_MD)
    assert [h for h, _ in sections] == ["Install", "Install > Upgrading"]
    blocks = dict(sections)["Install > Upgrading"]
    assert blocks == [
        ("text", "Pin the version"),
        ("text", "Versions before 2.1 break the loader."),
        ("code", "```python\n# a comment, not a heading\nimport fastlib\n```"),
        ("text", "Faster builds"), ("text", "Use the cache."),
        ("text", "Linux"), ("text", "Use the package manager."),
        ("text", "Read the release notes first. See the notes."),
        ("table", "| flag | default |\n| `--port` | 8080 |\n| badge | CI tar |"),
        ("code", "```text\n```\nnot a fence end\n```\n```"),
    ]
    text = "\n".join(t for _, found in sections for _, t in found)
    for artefact in ("{ #", "{:", "///", "!!!", "===", "<div", "<b>", "<!--", "{*", "{%", "](notes", "](http", "loading="):
        assert artefact not in text


def test_headings_and_code_blocks_agree_with_markdown_it():
    """markdown-it-py (CommonMark) as the oracle for what is a heading and what is code."""
    from markdown_it import MarkdownIt
    text = ("# One\n\ntext\n\nTwo\n===\n\n    indented text\n\n```sh\n# shell comment\nls\n```\n\n"
            "## Three ##\n\n~~~\n## not a heading\n~~~\n\nFour\n----\nend\n"
            "\n```py\ndef f():\n    return 1\n```\n\n  ```\n  a\n    b\n c\n  ```\n")   # indents kept
    tokens = MarkdownIt("commonmark").parse(text)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    fences = [t.content for t in tokens if t.type == "fence"]
    ours = readers.read_markdown(text)
    assert [h.split(" > ")[-1] for h, _ in ours] == headings == ["One", "Two", "Three", "Four"]
    code = [t for _, found in ours for kind, t in found if kind == "code"]
    assert ["\n".join(c.split("\n")[1:-1]) + "\n" for c in code] == fences


def test_front_matter_is_yaml():
    for block, tags in [("tags: [a, \"b, c\"]  # a comment", ["a", "b, c"]),
                        ("tags:\n  - x\n  - y", ["x", "y"]),
                        ("tags: solo", ["solo"]),
                        ("meta:\n  tags: [nested]\ntags: [top]", ["top"]),
                        ("title: no tags here", []),
                        ("tags: [unclosed", [])]:
        assert documents.split_front_matter(f"---\n{block}\n---\nbody") == (tags, "body"), block


def test_a_heading_with_a_long_run_of_spaces_keeps_its_words():
    # A pattern that backtracked over the spaces took over 120 s here; the speed of every
    # pattern on 2 MB inputs is measured by `python -m ragbench.markdown`, not timed here.
    text = "# a" + " " * 100_000 + "b\n" + "text\n"
    assert readers.read_markdown(text) == [("a b", [("text", "text")])]


# --- MyST (Sphinx's Markdown): a directive holds Markdown only if it is an admonition ------
MYST_MD = '''# Shell completion

Click completes commands, options and choices in Bash, Zsh and Fish once the program is
installed with an entry point.

```{eval-rst}
Add this to ``~/.bashrc`` to enable it:

.. code-block:: bash

    eval "$(_FOO_BAR_COMPLETE=bash_source foo-bar)"

The callback takes ``*args`` and no keywords.
```

```{note}
Restart the shell **after** editing `~/.bashrc`: only a new _login_ shell reads it.
```

```{code-block} python
:caption: complete.py
def complete_env_vars(ctx, param, incomplete):
    return [k for k in os.environ if k.startswith(incomplete)]   # __all__ *names*
```

```python
shell_complete(cli, {}, "foo-bar", "_FOO_BAR_COMPLETE", "bash_source")
```
'''


def test_myst_eval_rst_and_code_directives_are_kept_verbatim_as_code():
    [(heading, blocks)] = readers.read_markdown(MYST_MD)
    assert heading == "Shell completion"
    assert [text for kind, text in blocks if kind == "code"] == [
        "```{eval-rst}\nAdd this to ``~/.bashrc`` to enable it:\n\n.. code-block:: bash\n\n"
        "    eval \"$(_FOO_BAR_COMPLETE=bash_source foo-bar)\"\n\n"
        "The callback takes ``*args`` and no keywords.\n```",
        "```python\ndef complete_env_vars(ctx, param, incomplete):\n"
        "    return [k for k in os.environ if k.startswith(incomplete)]   # __all__ *names*\n```",
        "```python\nshell_complete(cli, {}, \"foo-bar\", \"_FOO_BAR_COMPLETE\", \"bash_source\")\n```"]


def test_a_myst_note_is_still_read_as_markdown():
    [(_, blocks)] = readers.read_markdown(MYST_MD)
    assert ("text", "Restart the shell after editing `~/.bashrc`: only a new login shell reads it.") in blocks
    assert "{note}" not in "\n".join(text for _, text in blocks)


def test_a_myst_pages_eval_rst_reaches_the_prompt_with_its_underscores(tmp_path):
    from ragkit import answering, chunking
    (tmp_path / "shell-completion.md").write_text(MYST_MD, encoding="utf-8")
    chunks = chunking.document_chunks(documents.load_documents(tmp_path))
    prompt = answering.grounded_prompt("How do I enable Bash completion?", chunks).text
    assert 'eval "$(_FOO_BAR_COMPLETE=bash_source foo-bar)"' in prompt
    assert "``*args``" in prompt and "only a new login shell reads it" in prompt
