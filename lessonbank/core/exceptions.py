"""Exception tree.

LessonbankError
├── InvalidArgument         an argument a caller passed cannot work (also a ValueError)
│   └── InvalidType             an argument of the wrong type (also a TypeError)
├── NotFound                a bank, lesson or run that is not there (also a LookupError)
├── ConfigurationError      settings that cannot work (bad URL, missing model files, ...)
├── ServiceUnavailable      Redis, Qdrant or the store owner did not answer in time
├── StoreError              the lesson store refused a read or write
├── UnknownRun              no record of a bank knows the run (never recorded, expired, or another bank's)
└── DistillError            distilling a run failed
    ├── TransientDistillError   worth retrying (timeout, connection error, 429, 5xx)
    └── PermanentDistillError   retrying will not help (4xx, output invalid after repair, no steps)
        └── UnusableOutput      the LLM answered twice with nothing usable (the run is distilled without it)
"""


class LessonbankError(Exception):
    """Base class of every error lessonbank raises."""


class InvalidArgument(LessonbankError, ValueError):
    """An argument that cannot work as given (a ValueError too, so ``except ValueError`` still catches it)."""


class InvalidType(InvalidArgument, TypeError):
    """An argument of the wrong type (a TypeError too)."""


class NotFound(LessonbankError, LookupError):
    """A bank, lesson or run that is not there (or a lesson id prefix that names none, or several)."""


class ConfigurationError(LessonbankError):
    """Settings or files that cannot work as given."""


class ServiceUnavailable(LessonbankError):
    """A service (Redis, Qdrant, the embedded-store owner) did not answer."""


class StoreError(LessonbankError):
    """The lesson store refused a read or a write."""


class UnknownRun(LessonbankError):
    """No record of the bank knows the run: not its hash, its summary, nor any lesson."""


class DistillError(LessonbankError):
    """Distilling a run into lessons failed."""


class TransientDistillError(DistillError):
    """A failure that a later retry may not have (timeout, connection error, 429, 5xx)."""


class PermanentDistillError(DistillError):
    """A failure that retrying will not fix (4xx, invalid output after repair, no steps)."""


class UnusableOutput(PermanentDistillError):
    """The LLM answered, and after one repair its reply was still not what was asked for (a model that loops,
    cut at its token limit): what the run shows without the LLM is still kept."""
