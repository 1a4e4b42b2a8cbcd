"""
ragkit/folder_index.py: the index of your own folder (--docs), built, or reused from --index.

    chunks, index, embedder = index_folder(args)      # --docs FOLDER [--index DIR] [--no-context]

Each chunk is embedded once, as the variant in use reads it: with its title in front under
--context (the --docs default), else its text alone. A saved index (ragkit/saved_index.py) is
rebuilt, with the reason said, when its inputs change: the backend, the model (its name and
weights), the chunk size, --context or the reader; when only files changed, MiniLM re-embeds
just the chunks of those files. A question on an unchanged index re-reads no file into chunks
and embeds nothing.
"""

import sys

import numpy as np

import rag_from_scratch as rag
from ragkit import chunking, documents
from ragkit.embeddings import encode_in_pieces, model_identity, question_embedder, use_threads
from ragkit.progress import Progress
from ragkit.saved_index import READER, load_index, save_index
from ragkit.storage import sha256_bytes
from ragkit.text import plural, printable


def fingerprint(docs: list[dict]) -> str:
    """A short hash of every document's id and text: it changes when any file changes."""
    return sha256_bytes("".join(f"{d['doc_id']}\0{d['text']}\0" for d in docs).encode("utf-8"))[:16]


def file_hashes(docs: list[dict]) -> dict:
    """doc_id -> hash of its text, so an update can tell which files changed."""
    return {d["doc_id"]: sha256_bytes(d["text"].encode("utf-8"))[:16] for d in docs}


def embedded_texts(chunks: list[dict], context: bool) -> list[str]:
    """What the model reads of each chunk: its title in front under --context."""
    return chunking.with_context(chunks) if context else [c["text"] for c in chunks]


def embed_reusing(texts: list[str], embedder, old_texts: list[str], old_vectors):
    """(vectors, embedded, reused): MiniLM vectors of `texts`, reusing the rows of `old_vectors`
    whose text is unchanged (a MiniLM vector depends on its own text: equal to a fresh build)."""
    row_of = {t: i for i, t in enumerate(old_texts)}
    rows = [row_of.get(t) for t in texts]
    keep = [i for i, r in enumerate(rows) if r is not None]
    todo = [i for i, r in enumerate(rows) if r is None]
    vectors = np.empty((len(texts), old_vectors.shape[1]), dtype=np.float32, order="F")
    vectors[keep] = old_vectors[[rows[i] for i in keep]]
    if todo:
        vectors[todo] = encode_in_pieces(embedder, [texts[i] for i in todo])
    return vectors, len(todo), len(keep)


def chunk_documents(docs: list[dict], words: int, fits) -> list[dict]:
    """chunking.document_chunks, a document at a time (the same chunks), with a bar on stderr:
    the model's tokenizer measures every piece (seconds for a thousand chunks)."""
    chunks = []
    with Progress("chunking", len(docs), " documents") as bar:
        for doc in docs:
            bar.update(0, now=doc["doc_id"])
            chunks += chunking.document_chunks([doc], words, fits)
            bar.update(1)
    return chunks


def build_index(texts: list[str], embedder):
    """The lesson's build_index of these texts; MiniLM encodes them in pieces with a bar on stderr
    (minutes for a thousand chunks on a busy laptop), TF-IDF in one go (seconds)."""
    if embedder.backend != "minilm":
        return rag.build_index([{"text": t} for t in texts], embedder)
    return np.asfortranarray(encode_in_pieces(embedder, texts))   # as the lesson stores it


def update_index(saved_index, saved_chunks, saved, chunks, embedder, meta, context: bool):
    """MiniLM vectors of `chunks`, embedding only the chunks of changed or new files."""
    index, embedded, reused = embed_reusing(embedded_texts(chunks, context), embedder,
                                            embedded_texts(saved_chunks, context), saved_index)
    old_files, new_files = saved.get("files") or {}, meta["files"]
    changed = len({documents.file_of(f) for f in set(old_files) | set(new_files)   # a PDF's pages: one file
                   if old_files.get(f) != new_files.get(f)})
    print(f"updated the index: {plural(changed, 'file')} changed or removed, "
          f"{plural(embedded, 'chunk')} embedded, "
          f"{reused} reused")
    return index


def index_folder(args):
    """(chunks, index, embedder) for a folder: the saved index when nothing changed, else the
    chunks made again and only what changed embedded; the index embeds the variant in use."""
    docs = documents.load_folder(args)
    backend = "tfidf" if args.backend == "tfidf" else "minilm"   # cli.py checked that MiniLM loads
    minilm = backend == "minilm"
    meta = {"backend": backend, "model": model_identity(backend, args.model),
            "chunk_size": args.chunk_size, "context": bool(args.context), "reader": READER,
            "fingerprint": fingerprint(docs), "files": file_hashes(docs)}
    files = len({documents.file_of(d["doc_id"]) for d in docs})      # a PDF is one file of many pages
    saved_index, saved_chunks, saved, why = (load_index(args.index, meta) if args.index
                                             else (None, None, None, "no --index"))
    if why is None:                       # nothing changed: only questions to embed from here
        embedder = question_embedder(args.model) if minilm else rag.Embedder("tfidf")
        embedder.fit(embedded_texts(saved_chunks, args.context))  # TF-IDF relearns its vocabulary
        width = (embedder.model.get_sentence_embedding_dimension() if minilm
                 else len(embedder.model.vocabulary_))
        if saved_index.shape[1] != width:                                 # not this model's vectors
            why, saved_index = "the saved vectors do not fit the model", None
    if why is None:
        chunks, index = saved_chunks, saved_index
        print(f"{files} files -> {len(chunks)} chunks: loaded the saved index from "
              f"{printable(args.index, lines=False)} "
              f"(not re-embedded)")
    else:
        with Progress("loading the embedding model"):      # MiniLM: seconds, shown as a clock
            embedder = rag.Embedder(backend, args.model)
        chunks = chunk_documents(docs, args.chunk_size, chunking.model_fits(embedder))
        print(f"{files} files -> {len(chunks)} chunks (sections whole up to {args.chunk_size} "
              f"words and what the model reads; code, lists and tables kept with their lead-in)")
        documents.print_biggest_file(chunks)          # before the wait: a huge file shows here
        if saved_index is not None and minilm:     # TF-IDF's words depend on every file: it refits
            index = update_index(saved_index, saved_chunks, saved, chunks, embedder, meta, args.context)
        else:
            print(f"building the index: {why}" if args.index else "building the index ...")
            index = build_index(embedded_texts(chunks, args.context), embedder)
        if args.index:
            save_index(args.index, index, chunks, meta)
            print(f"saved the index to {printable(args.index, lines=False)}")
    print(f"backend={embedder.backend}  index shape={index.shape}"
          + ("  (titles in front)" if args.context else ""))
    if minilm and why is not None:  # a saved index said it when it was built
        model = embedder.model
        report = chunking.truncation(embedded_texts(chunks, args.context), model.tokenizer,
                                      model.max_seq_length)
        print(chunking.truncation_line(report), file=sys.stderr)
    if minilm:
        use_threads(1)              # questions from here: on a busy laptop a second thread waits
    return chunks, index, embedder
