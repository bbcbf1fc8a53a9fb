"""The one LLM client and what it is built from. No other code calls the openai SDK."""

from rubricrl.llm.cache import ResponseCache
from rubricrl.llm.client import ChatResult, LLMClient, LLMError, Usage
from rubricrl.llm.connect import connected_roles
from rubricrl.llm.roles import Role, bind_local, resolve_roles
from rubricrl.llm.structured import StructuredOutputError, extract_json, json_schema_format, parse_structured

__all__ = [
    "ChatResult", "LLMClient", "LLMError", "ResponseCache", "Role", "StructuredOutputError", "Usage",
    "bind_local", "connected_roles", "extract_json", "json_schema_format", "parse_structured", "resolve_roles",
]  # fmt: skip
