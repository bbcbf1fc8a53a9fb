"""The local model: the embedded model (SmolLM2-135M-Instruct, converted once) and the vLLM servers that serve it
or any other model on this machine, found again by the commands that need them."""
