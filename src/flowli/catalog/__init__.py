"""The typed catalog of workflow types, the three-state view of runs, compositions (validated,
compiled, saved as ``virtual.<name>@<version>``), remediation gates, operations and RBAC."""

from flowli.domain import Prerequisite as Prerequisite

from ._catalog import AUDIT as AUDIT
from ._catalog import MAX_IDLE_SECONDS as MAX_IDLE_SECONDS
from ._catalog import Catalog as Catalog
from ._catalog import catalog_of as catalog_of
from ._compose import COMPILED_FORMAT_VERSION as COMPILED_FORMAT_VERSION
from ._compose import compile_definition as compile_definition
from ._compose import content_hash as content_hash
from ._compose import validate as validate
from ._dag import DAG as DAG
from ._dag import SAVE as SAVE
from ._dag import install as install
from ._errors import ApprovalNeeded as ApprovalNeeded
from ._errors import CatalogError as CatalogError
from ._errors import CompositionConflict as CompositionConflict
from ._errors import CompositionInvalid as CompositionInvalid
from ._errors import InputsInvalid as InputsInvalid
from ._errors import PermissionDenied as PermissionDenied
from ._errors import RemediationDenied as RemediationDenied
from ._errors import RemediationRequired as RemediationRequired
from ._errors import RunStateError as RunStateError
from ._errors import StepInputInvalid as StepInputInvalid
from ._errors import UnknownType as UnknownType
from ._rbac import ROLES as ROLES
from ._rbac import Roles as Roles
from ._rbac import policy as policy
from ._rbac import require_approval as require_approval
from ._rbac import roles_of as roles_of
from ._runs import PARKED as PARKED
from ._runs import RUN_TONES as RUN_TONES
from ._runs import decided as decided
from ._runs import inputs_of as inputs_of
from ._runs import remediation as remediation
from ._runs import steps_of as steps_of

__all__ = [
    "AUDIT",
    "ApprovalNeeded",
    "COMPILED_FORMAT_VERSION",
    "PARKED",
    "RUN_TONES",
    "Catalog",
    "CatalogError",
    "CompositionConflict",
    "CompositionInvalid",
    "DAG",
    "InputsInvalid",
    "MAX_IDLE_SECONDS",
    "PermissionDenied",
    "Prerequisite",
    "ROLES",
    "RemediationDenied",
    "RemediationRequired",
    "Roles",
    "decided",
    "remediation",
    "steps_of",
    "inputs_of",
    "RunStateError",
    "StepInputInvalid",
    "SAVE",
    "UnknownType",
    "catalog_of",
    "compile_definition",
    "content_hash",
    "install",
    "policy",
    "roles_of",
    "require_approval",
    "validate",
]
