"""The one LLM client and what it is built from. Every model call goes through `LLMClient`, which posts chat
completions itself (transport.py): the openai SDK is not used."""

from rubricrl.llm.cache import ResponseCache
from rubricrl.llm.client import LLMClient
from rubricrl.llm.connect import LLMSession, LLMSettings, open_llm
from rubricrl.llm.endpoints import EndpointStats
from rubricrl.llm.replies import EmptyAnswer, EndpointUnreachable, LLMError
from rubricrl.llm.results import ChatResult, Usage
from rubricrl.llm.roles import Role, bind_local, resolve_roles
from rubricrl.llm.structured import StructuredOutputError, json_schema_format, parse_structured

__all__ = [
    "ChatResult",
    "EmptyAnswer",
    "EndpointStats",
    "EndpointUnreachable",
    "LLMClient",
    "LLMError",
    "LLMSession",
    "LLMSettings",
    "ResponseCache",
    "Role",
    "StructuredOutputError",
    "Usage",
    "bind_local",
    "json_schema_format",
    "open_llm",
    "parse_structured",
    "resolve_roles",
]
