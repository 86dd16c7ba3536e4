"""Scriptorium `memory.consolidation`: memory that stays small and true (issue 23).

Layout (see docs/architecture.md): ``_facts`` what a paragraph states and
when (pure); ``_plan`` a pass as data and the check that it loses nothing
(pure); ``_triggers`` when a pass is due (pure); ``_offline`` the
deterministic consolidator; ``_model`` a model's proposals as a plan
(pure) and ``_model_pass`` the pass that asks the model; ``_pass`` a pass
through the topic transactions, its record, and the history of passes.
"""

from memory.consolidation._model import ProposalError as ProposalError
from memory.consolidation._model_pass import ModelConsolidator as ModelConsolidator
from memory.consolidation._model_pass import consolidate_with_model as consolidate_with_model
from memory.consolidation._offline import consolidate_offline as consolidate_offline
from memory.consolidation._pass import Consolidator as Consolidator
from memory.consolidation._pass import PreparedPass as PreparedPass
from memory.consolidation._pass import Scope as Scope
from memory.consolidation._pass import commit_pass as commit_pass
from memory.consolidation._pass import consolidate_workspace as consolidate_workspace
from memory.consolidation._pass import prepare_pass as prepare_pass
from memory.consolidation._pass import read_history as read_history
from memory.consolidation._plan import Action as Action
from memory.consolidation._plan import Plan as Plan
from memory.consolidation._plan import losses as losses
from memory.consolidation._triggers import ConsolidationPolicy as ConsolidationPolicy
from memory.consolidation._triggers import due_scope as due_scope

__all__ = [
    "Action",
    "ConsolidationPolicy",
    "Consolidator",
    "ModelConsolidator",
    "Plan",
    "PreparedPass",
    "ProposalError",
    "Scope",
    "commit_pass",
    "consolidate_offline",
    "consolidate_with_model",
    "consolidate_workspace",
    "due_scope",
    "losses",
    "prepare_pass",
    "read_history",
]
