"""The engine's one exception type.

Every failure the TypeScript side should understand is an EngineError with a short
machine-readable `code` (e.g. "bad_safetensors", "checkpoint_mismatch",
"bad_request"); the server sends code, message and traceback back over the pipe.
"""


class EngineError(Exception):
    """An engine failure with a stable machine-readable code.

    Codes in use: bad_request, unknown_op, bad_config, bad_safetensors, bad_checkpoint,
    checkpoint_mismatch, no_model, no_vocab, no_trainer, no_session, bad_patch,
    distributed.
    """

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"
