"""Scriptorium `memory.writers.model`: memory written by a model over HTTP (issue 14).

Layout (see docs/architecture.md): ``_settings`` what configures it;
``_prompt`` the writing rules and the bounded prompt; ``_edits`` the edits
schema, the strict parser and actions -> topic edits; ``_wire`` the OpenAI
and Anthropic wire formats; ``_retry`` the pure retry and budget rules;
``_transport`` one endpoint (pooled client, concurrency, retries);
``_writer`` :class:`ModelWriter`, the repair loop and usage; ``_usage`` the
usage file (totals for the audit, the daily budget across restarts).
"""

from memory._errors import EndpointRefusedError as EndpointRefusedError
from memory._errors import EndpointUnavailableError as EndpointUnavailableError
from memory._errors import EndpointUnreachableError as EndpointUnreachableError
from memory._errors import ModelCallFailedError as ModelCallFailedError
from memory._errors import ModelWriterFailedError as ModelWriterFailedError
from memory.writers.model._edits import EDITS_SCHEMA as EDITS_SCHEMA
from memory.writers.model._edits import ActionsUnreadableError as ActionsUnreadableError
from memory.writers.model._edits import EditAction as EditAction
from memory.writers.model._edits import parse_actions as parse_actions
from memory.writers.model._edits import to_topic_edits as to_topic_edits
from memory.writers.model._prompt import WRITING_RULES as WRITING_RULES
from memory.writers.model._prompt import Ranking as Ranking
from memory.writers.model._prompt import core_first as core_first
from memory.writers.model._prompt import render_model_prompt as render_model_prompt
from memory.writers.model._retry import DailySpend as DailySpend
from memory.writers.model._retry import RetryPolicy as RetryPolicy
from memory.writers.model._retry import batch_budget_allows as batch_budget_allows
from memory.writers.model._retry import daily_wait as daily_wait
from memory.writers.model._retry import parse_retry_after as parse_retry_after
from memory.writers.model._retry import retry_delay as retry_delay
from memory.writers.model._retry import retryable_status as retryable_status
from memory.writers.model._settings import ModelSettings as ModelSettings
from memory.writers.model._settings import check_base_url as check_base_url
from memory.writers.model._settings import model_settings as model_settings
from memory.writers.model._settings import redact_url as redact_url
from memory.writers.model._transport import CallStats as CallStats
from memory.writers.model._transport import Endpoint as Endpoint
from memory.writers.model._transport import probe_endpoint as probe_endpoint
from memory.writers.model._usage import USAGE_FILE as USAGE_FILE
from memory.writers.model._usage import UsageFile as UsageFile
from memory.writers.model._usage import merge_usage as merge_usage
from memory.writers.model._usage import read_model_usage as read_model_usage
from memory.writers.model._wire import Completion as Completion
from memory.writers.model._wire import ResponseUnreadableError as ResponseUnreadableError
from memory.writers.model._wire import build_request as build_request
from memory.writers.model._wire import read_response as read_response
from memory.writers.model._wire import refuses_form as refuses_form
from memory.writers.model._writer import ModelWriter as ModelWriter

__all__ = [
    "EDITS_SCHEMA",
    "USAGE_FILE",
    "WRITING_RULES",
    "ActionsUnreadableError",
    "CallStats",
    "Completion",
    "DailySpend",
    "EditAction",
    "Endpoint",
    "EndpointRefusedError",
    "EndpointUnavailableError",
    "EndpointUnreachableError",
    "ModelCallFailedError",
    "ModelSettings",
    "ModelWriter",
    "ModelWriterFailedError",
    "Ranking",
    "ResponseUnreadableError",
    "RetryPolicy",
    "UsageFile",
    "batch_budget_allows",
    "build_request",
    "check_base_url",
    "core_first",
    "daily_wait",
    "merge_usage",
    "model_settings",
    "parse_actions",
    "parse_retry_after",
    "probe_endpoint",
    "read_model_usage",
    "read_response",
    "redact_url",
    "refuses_form",
    "render_model_prompt",
    "retry_delay",
    "retryable_status",
    "to_topic_edits",
]
