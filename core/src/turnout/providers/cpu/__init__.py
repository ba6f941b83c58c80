"""The built-in CPUExecutionProvider (numpy): the last fallback for every standard op."""
