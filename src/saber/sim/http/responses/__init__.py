"""What saber-sim answers, in vLLM's shapes: SSE streams and whole bodies, the filler
text of an answer, and errors."""
