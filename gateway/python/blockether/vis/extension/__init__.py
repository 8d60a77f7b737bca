"""The Vis extension SDK: ``import blockether.vis.extension as vis``.

Declarations (``Extension``, ``Symbol``, ``SlashCommand``, ``OpHook``,
``NetworkFilter``, ``Provider``, ``Activity`` …) are frozen dataclasses that
validate on construction and perform no IO.  ``register`` applies one
``Extension`` per entry file.  The host-backed names (``state``, ``log``,
``notify``, ``ask``, ``live``, ``shell``, ``fs`` …) need the Vis gateway
worker; see ``_host`` for the bridge they use.
"""

from ._activity import (
    Activity,
    ActivityAudio,
    ActivityCode,
    ActivityDiff,
    ActivityFile,
    ActivityHeading,
    ActivityImage,
    ActivityMarkdown,
    ActivityPresentation,
    ActivityProgress,
    ActivitySection,
    ActivityTable,
    ActivityText,
    ActivityVideo,
    publish_activity,
)
from ._decl import GATE_OPS, Extension, NetworkFilter, OpHook, SlashCommand, block, err, ok, strings_of
from ._forms import (
    Answer,
    ask,
    checkbox,
    column,
    heading,
    multiline,
    multiselect,
    option,
    otp,
    paragraph,
    password,
    plaintext,
    row,
    select,
    slider,
)
from . import _legacy
from ._host import forget, host_env, log, notify, reveal, state
from ._live import (
    Interrupted,
    LiveView,
    link,
    live,
    output,
    progress,
    stat,
    status,
    steps,
    table,
    table_column,
    table_row,
)
from ._procs import Shell, fs, jailed_shell, jailed_shell_session, shell
from ._provider import (
    Provider,
    ProviderCredential,
    ProviderError,
    ProviderLimit,
    ProviderLimits,
    ProviderLimitWindow,
    ProviderModel,
    ProviderPreset,
    ProviderStatus,
)
from ._registry import register, register_extension
from ._symbol import Symbol, method

__all__ = [
    "Activity", "ActivityAudio", "ActivityCode", "ActivityDiff", "ActivityFile",
    "ActivityHeading", "ActivityImage", "ActivityMarkdown", "ActivityPresentation",
    "ActivityProgress", "ActivitySection", "ActivityTable", "ActivityText", "ActivityVideo",
    "Answer", "Extension", "GATE_OPS", "Interrupted", "LiveView", "NetworkFilter", "OpHook",
    "Provider", "ProviderCredential", "ProviderError", "ProviderLimit", "ProviderLimitWindow",
    "ProviderLimits", "ProviderModel", "ProviderPreset", "ProviderStatus", "Shell",
    "SlashCommand", "Symbol", "ask", "block", "checkbox", "column", "err", "forget", "fs",
    "heading", "host_env", "jailed_shell", "jailed_shell_session", "link", "live", "log",
    "method", "multiline", "multiselect", "notify", "ok", "option", "otp", "output",
    "paragraph", "password", "plaintext", "progress", "publish_activity", "register",
    "register_extension", "reveal", "row", "select", "shell", "slider", "stat", "state",
    "status", "steps", "strings_of", "table", "table_column", "table_row",
]


def __getattr__(name):
    # The older API's lowercase builders are not provided (docs/decisions.md, E1): say what replaces them.
    if name in _legacy.PORTS:
        raise _legacy.attribute_error(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
