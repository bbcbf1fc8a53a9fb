"""The response inside an OpenRLHF reward request (engines/service.py): OpenRLHF sends the templated prompt and the
response decoded together, special tokens kept, as `query`."""

# End-of-sequence tokens as a tokenizer decodes them with special tokens kept (ChatML/Qwen, Llama 3, Phi, gpt-oss,
# Gemma, Mistral/Llama 2, DeepSeek): removed from the end of an OpenRLHF query's response.
DEFAULT_EOS = [
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<|return|>",
    "<end_of_turn>",
    "<eos>",
    "</s>",
    "<｜end▁of▁sentence｜>",
]


def split_response(query: str, prompt: str, eos: list[str]) -> str | None:
    """The response in an OpenRLHF query: what follows the prompt (None when the prompt is not in the query, e.g.
    a prompt truncated by the engine), without trailing end-of-sequence tokens."""
    if query.startswith(prompt):
        response = query[len(prompt) :]
    else:
        at = query.find(prompt) if prompt else -1
        if at < 0:
            return None
        response = query[at + len(prompt) :]
    stripped = True
    while stripped:
        stripped = False
        response = response.rstrip()
        for token in eos:
            if token and response.endswith(token):
                response = response[: -len(token)]
                stripped = True
    return response
