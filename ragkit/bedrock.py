"""
ragkit/bedrock.py: Amazon Bedrock for the command line, with advice instead of tracebacks.

rag_from_scratch.generate_with_bedrock is the lesson: one Converse call. This companion
wraps it for `--generate` so a learner's first run fails kindly and never hangs:
  - before any work: the placeholder model id, boto3 missing, a profile that does not
    exist, or no credentials at all, each one line that says what to set up;
  - during the call: one overall deadline (botocore's own timeouts apply per attempt and
    its retries multiply them), said on stderr before waiting; a streamed answer's events
    all arrive within it too, and a stall or damaged bytes in mid-stream are one line;
  - every Converse error code: one line of advice a learner can act on.
"""

import os
from dataclasses import dataclass, field

import rag_from_scratch as rag
from ragkit.deadlines import items_with_deadline, with_deadline
from ragkit.text import printable

ATTEMPTS = 3                 # botocore standard retry mode: the first try included
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 20          # per attempt; a RAG answer of 300 tokens takes a few seconds
DEADLINE_S = 45              # for the whole call, retries included

# What a learner should do about each Bedrock error code (the Converse API's nine, plus
# the two that bad keys give).
ADVICE = {
    "AccessDeniedException": "access denied to model {model_id}: enable access to it in the "
                             "Bedrock console (Model access) for {region} and allow "
                             "bedrock:InvokeModel for your IAM identity",
    "ValidationException": "Bedrock rejected the request for {model_id}: check that --model-id "
                           "is a model or inference-profile id offered in {region}",
    "ResourceNotFoundException": "model {model_id} was not found in {region}: copy the id from "
                                 "the Bedrock model catalog, or try another --region",
    "ThrottlingException": "Bedrock is throttling requests (gave up after {attempts} attempts): "
                           "wait a minute and retry, or ask for a higher quota",
    "ModelTimeoutException": "model {model_id} took too long to answer: retry, or ask for a "
                             "shorter answer with a smaller --k",
    "ModelNotReadyException": "model {model_id} is not ready yet (it may be starting up): "
                              "wait a minute and retry",
    "ServiceUnavailableException": "Bedrock in {region} is unavailable right now: retry later "
                                   "or try another --region",
    "InternalServerException": "Bedrock had an internal error: retry; if it persists, check "
                               "the AWS Health Dashboard for {region}",
    "ModelErrorException": "model {model_id} failed while answering: retry, or try another model",
    "UnrecognizedClientException": "AWS does not recognise your access key: check "
                                   "AWS_ACCESS_KEY_ID or run `aws configure` again",
    "ExpiredTokenException": "your AWS session token has expired: refresh your credentials "
                             "(e.g. `aws sso login`) and retry",
}


def aws_session(region: str = "us-east-1"):
    """A boto3 session that has credentials, or one clear error: boto3 missing, a profile
    that does not exist, no credentials at all. No client is made and nothing is sent."""
    try:
        import boto3
        from botocore.exceptions import ProfileNotFound
    except ImportError:
        raise RuntimeError("boto3 is not installed: run `.venv/bin/pip install boto3`") from None
    if os.environ.get("AWS_PROFILE") == "":
        raise RuntimeError("AWS_PROFILE is set but empty: unset it or name a profile")
    try:
        session = boto3.Session(region_name=region)
        credentials = session.get_credentials()
    except ProfileNotFound as exc:
        raise RuntimeError(f"{exc}: check AWS_PROFILE or run `aws configure --profile NAME`") from None
    if credentials is None:
        raise RuntimeError("no AWS credentials found: run `aws configure` (or set AWS_PROFILE, "
                           "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) before --generate")
    return session


def bedrock_client(region: str = "us-east-1", attempts: int = ATTEMPTS):
    """A bedrock-runtime client with bounded timeouts and retries, or one clear error."""
    from botocore.config import Config
    config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                    retries={"mode": "standard", "total_max_attempts": attempts})
    return aws_session(region).client("bedrock-runtime", config=config)


def check_model_id(model_id: str) -> None:
    """ValueError for the placeholder model id (or none)."""
    if not model_id or model_id.startswith("<"):
        raise ValueError("Amazon Bedrock needs a real --model-id (a model or inference-profile "
                         "id enabled in your account), not the placeholder")


def check_setup(model_id: str, region: str) -> None:
    """Before any slow work: the model id is not the placeholder and credentials exist, so a
    first run fails in a second with what to set up."""
    check_model_id(model_id)
    aws_session(region)


def explain(exc: Exception, model_id: str, region: str, attempts: int = ATTEMPTS) -> Exception:
    """A botocore error turned into a RuntimeError (or ValueError) with advice."""
    from botocore.eventstream import ParserError
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ParamValidationError
    from urllib3.exceptions import HTTPError as ReadError     # botocore reads a stream with urllib3
    if isinstance(exc, NoCredentialsError):
        return RuntimeError("no AWS credentials found: run `aws configure` before --generate")
    if isinstance(exc, ParamValidationError):          # our request broke the Converse schema
        return ValueError(f"invalid Converse request: {exc}")
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        advice = ADVICE.get(code, "Bedrock returned {code}: {message}")
        return RuntimeError(advice.format(model_id=model_id, region=region, attempts=attempts,
                                          code=code, message=message))
    if isinstance(exc, BotoCoreError):
        return RuntimeError(f"could not reach Bedrock in {region}: {exc}")
    if isinstance(exc, ParserError):                  # ConverseStream's bytes, damaged on the way
        return RuntimeError(f"Amazon Bedrock in {region} sent a reply stream that cannot be read "
                            f"({type(exc).__name__}: {exc}): retry; if it persists, a proxy or "
                            f"firewall may be changing replies")
    if isinstance(exc, ReadError):                    # a stall or a broken connection, mid-stream
        return RuntimeError(f"Amazon Bedrock in {region} stopped answering in mid-reply ({exc}): "
                            f"check your network and retry")
    return exc


@dataclass
class Bedrock:
    """Amazon Bedrock as a generator: bedrock(prompt, system_prompt) -> str, the lesson's llm_fn,
    bounded in time, with advice on errors; with streams, an iterator of the answer's pieces."""
    model_id: str
    region: str
    client: object              # bedrock-runtime, with bounded timeouts and retries
    deadline_s: float = DEADLINE_S
    streams: bool = False
    runtime: str = "Amazon Bedrock, billed"
    truncated: bool = False     # Converse's stop reason is not read: never known to be cut
    usage: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The name shown above the answer."""
        return self.runtime

    @property
    def attempts(self) -> int:
        """The tries botocore makes of one call, the first included."""
        return (self.client.meta.config.retries or {}).get("total_max_attempts", ATTEMPTS)

    def answer(self, prompt):
        """The answer to a grounded prompt (ragkit/grounded.py): its text and system prompt."""
        return self(prompt.text, prompt.system)

    def __call__(self, prompt: str, system_prompt: str):
        if self.streams:
            return self.pieces(prompt, system_prompt)
        where = f"Amazon Bedrock in {self.region}"
        ask = lambda: rag.generate_with_bedrock(prompt, system_prompt, self.model_id, self.region,
                                                client=self.client)
        try:
            return printable(with_deadline(where, self.deadline_s, ask, f"check your network and "
                                           f"that {self.region} is the right --region"))
        except Exception as exc:
            raise explain(exc, self.model_id, self.region, self.attempts) from None

    def events(self, prompt: str, system_prompt: str):
        """ConverseStream's events, read by botocore as they arrive."""
        request = rag.converse_request(prompt, system_prompt, self.model_id)   # generate_with_bedrock's
        yield from self.client.converse_stream(**request)["stream"]

    def pieces(self, prompt: str, system_prompt: str):
        """The answer's text deltas, the request and every event within deadline_s; each read
        within botocore's READ_TIMEOUT_S; every error one line of advice."""
        try:
            for event in items_with_deadline(f"Amazon Bedrock in {self.region}", self.deadline_s,
                                             self.events(prompt, system_prompt), "check your network"):
                text = event.get("contentBlockDelta", {}).get("delta", {}).get("text")
                if text:                  # reasoning deltas and metadata events: skipped
                    yield printable(text)
        except Exception as exc:
            raise explain(exc, self.model_id, self.region, self.attempts) from None


def bedrock_generator(model_id: str, region: str = "us-east-1", client=None,
                      deadline_s: float = DEADLINE_S, stream: bool = False) -> Bedrock:
    """The Bedrock generator (the placeholder model id refused now); stream=True: its answer
    comes as an iterator of text pieces (converse_stream)."""
    check_model_id(model_id)
    return Bedrock(model_id, region, client or bedrock_client(region), deadline_s, stream)
