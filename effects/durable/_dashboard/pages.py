"""
The dashboard's pages as HTML text: no Starlette here, only records in and a string out.

Every piece of stored text (an id, a name, a message, a payload) goes through ``text``: shown as
``safe`` shows it on a terminal (escape sequences and bidirectional controls made visible), then
HTML-escaped. No page holds inline script or event handlers (its Content-Security-Policy
``default-src 'self'`` would refuse them); ``dashboard.js`` and ``dashboard.css`` come from the
package. Times are ISO-8601 UTC with milliseconds, rendered here.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote, urlencode

import attrs

from effects.durable._policy import attempts_bound, policy_repr
from effects.durable._records import FINISHED, Checkpoint, Event, Run
from effects.durable._views import clip, error_text, event_data, iso, safe
from effects.durable.errors import StepError

__all__ = [
    "PAGE_SIZE",
    "STATUSES",
    "Frame",
    "RunFilter",
    "bulk_done",
    "bulk_preview",
    "error_page",
    "queues_page",
    "run_href",
    "run_page",
    "runs_page",
    "text",
]

#: Runs per page of the runs view.
PAGE_SIZE: Final = 50
#: Every run status, in the order the counts show them.
STATUSES: Final = ("pending", "running", "suspended", "completed", "failed", "cancelled", "dead")
_VALUE_LIMIT: Final = 20_000
_CELL_LIMIT: Final = 80


def text(value: object) -> str:
    """Stored text as a page shows it: ``safe`` (escapes made visible), then HTML-escaped."""
    return html.escape(safe(str(value)), quote=True)


def _attr(value: str) -> str:
    """A value of our own (a URL we built, a token) inside a quoted attribute."""
    return html.escape(value, quote=True)


@attrs.frozen
class Frame:
    """
    What every page of one request shares: the mount point *root* (``""`` or ``"/ops"``) its
    links start with, the *csrf* value its forms carry, whether it is *read_only*, and the
    store's *location* for the header.
    """

    root: str
    csrf: str
    read_only: bool
    location: str

    def href(self, path: str, params: Sequence[tuple[str, str]] = ()) -> str:
        """The URL of *path* (starting with ``/``) under the mount point, with *params*."""
        query = urlencode(list(params))
        return f"{self.root}{path}{'?' if query else ''}{query}"


def run_href(frame: Frame, run_id: str, action: str = "") -> str:
    """The URL of a run's page (or of its *action*): its id is one percent-encoded segment."""
    return frame.href(f"/runs/{quote(run_id, safe='')}{'/' + action if action else ''}")


@attrs.frozen
class RunFilter:
    """
    The runs view's filters, as its query string gives them: a *status*, a *workflow*, a run-id
    *id_prefix*, *retrying* (a step waiting out its backoff now), *stale* (the ``runs --stale``
    rule, its duration as given, e.g. ``"10m"``).
    """

    status: str | None = None
    workflow: str | None = None
    id_prefix: str | None = None
    retrying: bool = False
    stale: str | None = None

    def params(self) -> list[tuple[str, str]]:
        """The filters as query parameters (those that are on)."""
        given: list[tuple[str, str]] = []
        if self.status:
            given.append(("status", self.status))
        if self.workflow:
            given.append(("workflow", self.workflow))
        if self.id_prefix:
            given.append(("id", self.id_prefix))
        if self.retrying:
            given.append(("retrying", "1"))
        if self.stale:
            given.append(("stale", self.stale))
        return given

    @property
    def empty(self) -> bool:
        """Whether no filter is on."""
        return not self.params()

    def describe(self) -> str:
        """The filters in words, as HTML (``status = <code>failed</code>``), values escaped."""
        words = {
            "status": "status =",
            "workflow": "workflow =",
            "id": "run id starts with",
            "stale": "stale for at least",
        }
        shown = [
            "retrying" if key == "retrying" else f"{words[key]} <code>{text(value)}</code>"
            for key, value in self.params()
        ]
        return ", ".join(shown) or "no filter: every run"


# -- the frame -------------------------------------------------------------------------------


def _layout(frame: Frame, title: str, body: str, *, live: str = "", active: str = "") -> str:
    nav = "".join(
        f'<a href="{_attr(frame.href(path))}"{" class=on" if name == active else ""}>{name}</a>'
        for name, path in (("Runs", "/"), ("Queues", "/queues"))
    )
    mode = '<span class="mode">read-only</span>' if frame.read_only else ""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title} · effects.durable</title>"
        f'<link rel="icon" href="{_attr(frame.href("/static/favicon.svg"))}" type="image/svg+xml">'
        f'<link rel="stylesheet" href="{_attr(frame.href("/static/dashboard.css"))}">'
        f'<script src="{_attr(frame.href("/static/dashboard.js"))}" defer></script>'
        "</head><body>"
        f'<header class="top"><a class="brand" href="{_attr(frame.href("/"))}">'
        "effects<b>.durable</b></a>"
        f"<nav>{nav}</nav>{mode}"
        f'<span class="store" title="the engine\'s store">{text(frame.location)}</span></header>'
        f'<main id="main"{live}>{body}</main>'
        "</body></html>\n"
    )


def _badge(status: str) -> str:
    return f'<span class="badge s-{_attr(status)}">{text(status)}</span>'


def _status(run: Run, retrying: bool) -> str:
    return _badge(run.status) + (" " + _badge("retrying") if retrying else "")


def _csrf(frame: Frame) -> str:
    return f'<input type="hidden" name="csrf" value="{_attr(frame.csrf)}">'


def _button(frame: Frame, action: str, label: str, *, kind: str = "", extra: str = "") -> str:
    return (
        f'<form method="post" action="{_attr(action)}" class="inline">{_csrf(frame)}{extra}'
        f'<button type="submit" class="btn {kind}">{label}</button></form>'
    )


def _json_block(value: Any) -> str:
    """A payload as indented JSON, each line escaped; cut past ``_VALUE_LIMIT`` characters."""
    if value is None:
        return '<span class="none">-</span>'
    shown = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    extra = ""
    if len(shown) > _VALUE_LIMIT:
        extra = f"\n… {len(shown) - _VALUE_LIMIT} more characters (the JSON view has them all)"
        shown = shown[:_VALUE_LIMIT]
    lines = "\n".join(text(line) for line in shown.split("\n"))
    return f"<pre>{lines}{text(extra)}</pre>"


def _error(error: StepError | None) -> str:
    if error is None:
        return '<span class="none">-</span>'
    code = f'<span class="code">[{text(error.code)}]</span> ' if error.code else ""
    message = text(" ".join(error.message.split()) or error.type)
    return f"{code}{message}"


# -- runs ------------------------------------------------------------------------------------


def runs_page(
    frame: Frame,
    *,
    runs: Sequence[Run],
    retrying: set[str],
    counts: Mapping[str, int],
    retrying_count: int,
    where: RunFilter,
    after: str | None,
    next_after: str | None,
    retryable: int,
) -> str:
    """
    The runs view: status counts (each a link), the filter form, a page of runs (newest first)
    with a link to the next page, and "Retry all N matching" on a filtered view.
    """
    total = sum(counts.values())
    base = [p for p in where.params() if p[0] not in ("status", "retrying")]
    chips = [_chip(frame, "all", total, base, on=not where.status and not where.retrying)]
    chips += [
        _chip(frame, s, counts.get(s, 0), [*base, ("status", s)], on=where.status == s, status=s)
        for s in STATUSES
    ]
    chips.append(
        _chip(
            frame,
            "retrying",
            retrying_count,
            [*base, ("retrying", "1")],
            on=where.retrying,
            status="retrying",
        )
    )
    options = "".join(
        f'<option value="{s}"{" selected" if where.status == s else ""}>{s}</option>'
        for s in ("", *STATUSES)
    ).replace('<option value="">', '<option value="">any status')
    form = (
        f'<form method="get" action="{_attr(frame.href("/"))}" class="filters">'
        f'<label>Status <select name="status">{options}</select></label>'
        f'<label>Workflow <input name="workflow" value="{text(where.workflow or "")}"'
        ' placeholder="name" autocomplete="off"></label>'
        f'<label>Run id <input name="id" value="{text(where.id_prefix or "")}"'
        ' placeholder="starts with" autocomplete="off"></label>'
        '<label class="check"><input type="checkbox" name="retrying" value="1"'
        f"{' checked' if where.retrying else ''}> retrying</label>"
        f'<label>Stale for <input name="stale" value="{text(where.stale or "")}"'
        ' placeholder="e.g. 10m" size="6" autocomplete="off"></label>'
        '<button type="submit" class="btn primary">Filter</button>'
        f'<a class="btn plain" href="{_attr(frame.href("/"))}">Clear</a></form>'
    )
    bulk = ""
    if not where.empty and retryable and not frame.read_only:
        bulk = (
            f'<p class="bulk"><a class="btn warn" href="'
            f'{_attr(frame.href("/bulk/retry", where.params()))}">Retry all {retryable}'
            " matching</a></p>"
        )
    if runs:
        rows = "".join(_run_row(frame, r, r.run_id in retrying) for r in runs)
        table = (
            '<table class="runs"><thead><tr><th>Run</th><th>Workflow</th><th>Status</th>'
            "<th>Created</th><th>Updated</th><th>Error</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    else:
        table = '<p class="empty">No runs match.</p>'
    pager: list[str] = []
    if after is not None:
        pager.append(f'<a class="btn plain" href="{_attr(frame.href("/", where.params()))}">'
                     "← Newest</a>")  # fmt: skip
    if next_after is not None:
        params = [*where.params(), ("after", next_after)]
        pager.append(f'<a class="btn plain" rel="next" href="{_attr(frame.href("/", params))}">'
                     "Older →</a>")  # fmt: skip
    body = (
        f'<div class="head"><h1>Runs</h1><p class="muted">{where.describe()}</p></div>'
        f'<nav class="chips">{"".join(chips)}</nav>{form}{bulk}{table}'
        f'<nav class="pager">{"".join(pager)}</nav>'
    )
    return _layout(frame, "Runs", body, active="Runs")


def _chip(
    frame: Frame,
    label: str,
    count: int,
    params: Sequence[tuple[str, str]],
    *,
    on: bool,
    status: str = "all",
) -> str:
    return (
        f'<a class="chip s-{status}{" on" if on else ""}" href="{_attr(frame.href("/", params))}">'
        f"{label} <b>{count}</b></a>"
    )


def _run_row(frame: Frame, run: Run, retrying: bool) -> str:
    return (
        f'<tr><td class="id"><a href="{_attr(run_href(frame, run.run_id))}">{text(run.run_id)}'
        f"</a></td><td>{text(run.workflow)}</td><td>{_status(run, retrying)}</td>"
        f'<td class="t">{iso(run.created_at)}</td><td class="t">{iso(run.updated_at)}</td>'
        f'<td class="err">{_clipped_error(run.error)}</td></tr>'
    )


def _clipped_error(error: StepError | None) -> str:
    if error is None:
        return '<span class="none">-</span>'
    return text(clip(error_text(error), _CELL_LIMIT))


# -- a run -----------------------------------------------------------------------------------


@attrs.frozen
class EventPage:
    """One page of a run's event trail: its *events*, from *offset*, of *total* after *failed*."""

    events: Sequence[Event]
    offset: int
    limit: int
    total: int
    failed_only: bool


def run_page(
    frame: Frame,
    *,
    run: Run,
    retrying: bool,
    checkpoints: Sequence[Checkpoint],
    trail: EventPage,
    now_ms: int,
    version: str,
    redispatchable: bool,
) -> str:
    """
    A run's view: its fields and actions, its checkpoints, and one page of its event trail;
    live over Server-Sent Events (``dashboard.js``), and current on every reload without it.
    """
    actions = "" if frame.read_only else _actions(frame, run, redispatchable=redispatchable)
    wake = iso(run.wake_at)
    if run.wake_at is not None:
        wait = (run.wake_at - now_ms) / 1000
        wake += f" (in {wait:.1f} s)" if wait > 0 else " (due)"
    fields = [
        ("Workflow", f"{text(run.workflow)} <span class=muted>version {text(run.version)}</span>"),
        ("Created", iso(run.created_at)),
        ("Updated", iso(run.updated_at)),
        ("Wakes at", wake),
        ("Recovered", f"{run.recovery_attempts} times"),
    ]
    if run.cancel is not None:
        how = "with compensation" if run.cancel == "compensate" else "plainly"
        fields.append(("Cancel", f"asked for, {how}"))
    if run.error is not None:
        fields.append(("Error", f'<span class="err">{_error(run.error)}</span>'))
        fields.append(("Error type", f"<code>{text(run.error.type)}</code>"))
        if run.error.details is not None:
            fields.append(("Details", _json_block(run.error.details)))
    facts = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in fields)
    payloads = (
        f'<div class="payloads"><section><h3>Input</h3>{_json_block(run.input)}</section>'
        f"<section><h3>Output</h3>{_json_block(run.output)}</section></div>"
    )
    live = (
        f' data-stream="{_attr(frame.href("/api/runs/" + quote(run.run_id, safe="") + "/stream"))}"'
        f' data-version="{_attr(version)}"'
    )
    body = (
        f'<p class="crumbs"><a href="{_attr(frame.href("/"))}">Runs</a> /</p>'
        f'<div class="head"><h1 class="id">{text(run.run_id)}</h1>'
        f'<span class="status">{_status(run, retrying)}</span>{actions}</div>'
        f'<dl class="facts">{facts}</dl>{payloads}'
        f"<h2>Checkpoints <span class=muted>{len(checkpoints)}</span></h2>"
        f"{_checkpoints(checkpoints, now_ms)}"
        f"{_trail(frame, run, trail)}"
        '<p class="muted live"><span class="dot"></span> This page updates itself while the run'
        " is not finished; reload to update it without JavaScript."
        f' <a href="{_attr(frame.href("/api/runs/" + quote(run.run_id, safe="")))}">JSON</a></p>'
    )
    return _layout(frame, f"Run {text(clip(run.run_id, 40))}", body, live=live, active="Runs")


def _actions(frame: Frame, run: Run, *, redispatchable: bool) -> str:
    buttons: list[str] = []
    if run.status in ("failed", "dead", "cancelled"):
        buttons.append(
            _button(frame, run_href(frame, run.run_id, "retry"), "Retry", kind="primary")
        )
    if run.status not in FINISHED:
        if redispatchable:
            buttons.append(_button(frame, run_href(frame, run.run_id, "redispatch"), "Redispatch"))
        cancel = run_href(frame, run.run_id, "cancel")
        buttons.append(_button(frame, cancel, "Cancel", kind="danger"))
        if run.cancel != "compensate":
            buttons.append(
                _button(
                    frame,
                    cancel,
                    "Cancel and compensate",
                    kind="danger",
                    extra='<input type="hidden" name="compensate" value="1">',
                )
            )
    return f'<div class="actions">{"".join(buttons)}</div>' if buttons else ""


def attempt_text(checkpoint: Checkpoint) -> str:
    """``attempt N of M`` (``∞`` for a schedule without a cap; ``attempt N`` with no policy)."""
    n = checkpoint.attempts
    if checkpoint.policy is None:
        return f"attempt {n}"
    bound = attempts_bound(checkpoint.policy)
    return f"attempt {n} of {'∞' if bound is None else bound}"


def _checkpoints(checkpoints: Sequence[Checkpoint], now_ms: int) -> str:
    if not checkpoints:
        return '<p class="empty">No checkpoints yet.</p>'
    rows: list[str] = []
    for c in checkpoints:
        status = f"{c.status} (final)" if c.status == "failed" and c.final else c.status
        if c.status == "failed" and not c.final and c.wake_at is not None and c.wake_at > now_ms:
            status_html = _badge(c.status) + " " + _badge("retrying")
        else:
            status_html = _badge(c.status) + (" <small>final</small>" if "final" in status else "")
        nxt = "-"
        if c.status == "failed" and not c.final and c.wake_at is not None:
            nxt = iso(c.wake_at)
        elif c.status in ("pending", "running") and c.wake_at is not None:
            nxt = f"lease until {iso(c.wake_at)}"
        progress = "-"
        if c.progress is not None or c.heartbeat_at is not None:
            beat = (
                "" if c.heartbeat_at is None else f"<br><small>beat {iso(c.heartbeat_at)}</small>"
            )
            shown = "-" if c.progress is None else json.dumps(c.progress, ensure_ascii=False)
            progress = f"<code>{text(clip(shown, _CELL_LIMIT))}</code>{beat}"
        repr_ = policy_repr(c.policy)
        policy = "-" if repr_ is None else f"<code>{text(repr_)}</code>"
        rows.append(
            f'<tr><td class="n">{c.seq}</td><td>{text(c.name)}</td><td>{text(c.kind)}</td>'
            f'<td>{status_html}</td><td class="nowrap">{attempt_text(c)}</td>'
            f'<td class="err">{_error(c.error)}</td><td class="t">{nxt}</td>'
            f'<td class="policy">{policy}</td><td>{progress}</td></tr>'
        )
    return (
        '<table class="checkpoints"><thead><tr><th>Seq</th><th>Name</th><th>Kind</th>'
        "<th>Status</th><th>Attempt</th><th>Last error</th><th>Next attempt</th>"
        "<th>Policy</th><th>Progress</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _trail(frame: Frame, run: Run, trail: EventPage) -> str:
    here = f"/runs/{quote(run.run_id, safe='')}"
    filters = "".join(
        f'<a class="chip{" on" if trail.failed_only == failed else ""}" href="'
        f'{_attr(frame.href(here, [("failed", "1")] if failed else []))}">{label}</a>'
        for label, failed in (("all", False), ("failed only", True))
    )
    if trail.events:
        rows = "".join(
            f'<tr class="l-{_attr(safe(e.level))}"><td class="t">{iso(e.at)}</td>'
            f'<td class="n">{"-" if e.seq is None else e.seq}</td>'
            f"<td>{_badge(e.level)}</td><td>{text(e.name)}</td>"
            f'<td class="data">{html.escape(event_data(e.data, 400))}</td></tr>'
            for e in trail.events
        )
        table = (
            '<table class="events"><thead><tr><th>At</th><th>Seq</th><th>Level</th>'
            f"<th>Event</th><th>Data</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    else:
        table = '<p class="empty">No events.</p>'
    keep = [("failed", "1")] if trail.failed_only else []
    pager: list[str] = []
    if trail.offset > 0:
        back = max(0, trail.offset - trail.limit)
        pager.append(
            f'<a class="btn plain" href="{_attr(frame.href(here, [*keep, ("from", str(back))]))}">'
            "← Earlier</a>"
        )
    end = trail.offset + len(trail.events)
    if end < trail.total:
        pager.append(
            f'<a class="btn plain" rel="next" href="'
            f'{_attr(frame.href(here, [*keep, ("from", str(end))]))}">Later →</a>'
        )
    shown = f"{trail.offset + 1}-{end} of {trail.total}" if trail.events else f"0 of {trail.total}"
    return (
        f'<h2 id="events">Events <span class=muted>{shown}</span></h2>'
        f'<nav class="chips">{filters}</nav>{table}<nav class="pager">{"".join(pager)}</nav>'
    )


# -- queues, bulk, errors --------------------------------------------------------------------


def queues_page(
    frame: Frame, *, stats: Mapping[str, tuple[int, int]], limits: Mapping[str, int]
) -> str:
    """The queues view: each queue's slots in use (of its concurrency) and attempts waiting."""
    names = sorted(set(stats) | set(limits))
    if names:
        rows = "".join(
            f"<tr><td>{text(name)}</td>"
            f'<td class="n">{stats.get(name, (0, 0))[0]}</td>'
            f'<td class="n">{limits.get(name, "?")}</td>'
            f'<td class="n">{stats.get(name, (0, 0))[1]}</td></tr>'
            for name in names
        )
        table = (
            '<table class="queues"><thead><tr><th>Queue</th><th class="n">Slots in use</th>'
            '<th class="n">Concurrency</th><th class="n">Attempts waiting</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
        )
    else:
        table = '<p class="empty">No flow-control queues: none configured, no attempt in one.</p>'
    body = f'<div class="head"><h1>Queues</h1></div>{table}'
    return _layout(frame, "Queues", body, active="Queues")


def bulk_preview(frame: Frame, *, where: RunFilter, matched: int, limit: int) -> str:
    """The preview of a bulk retry: how many runs match and the exact filter; an Apply form."""
    fields = "".join(
        f'<input type="hidden" name="{_attr(k)}" value="{text(v)}">' for k, v in where.params()
    )
    apply = (
        ""
        if frame.read_only or not matched
        else (
            f'<form method="post" action="{_attr(frame.href("/bulk/retry"))}">{_csrf(frame)}'
            f'{fields}<button type="submit" class="btn warn">Apply</button> '
            f'<a class="btn plain" href="{_attr(frame.href("/", where.params()))}">Back</a></form>'
        )
    )
    note = (
        f" The first {limit} (newest first) are requeued now; apply again for the rest."
        if matched > limit
        else ""
    )
    body = (
        '<div class="head"><h1>Retry runs</h1></div>'
        f'<p class="big">{matched} failed, dead or cancelled run(s) match {where.describe()}.'
        f"{note}</p><p class=muted>Nothing has changed yet. Their failed steps get a fresh first"
        " attempt; completed steps are not run again.</p>"
        f"{apply}"
    )
    return _layout(frame, "Retry runs", body, active="Runs")


def bulk_done(frame: Frame, *, where: RunFilter, matched: int, applied: int) -> str:
    """The result of a bulk retry: ``matched N, applied M``."""
    body = (
        '<div class="head"><h1>Retry runs</h1></div>'
        f'<p class="big">matched {matched}, applied {applied}</p>'
        f"<p class=muted>Filter: {where.describe()}.</p>"
        f'<p><a class="btn plain" href="{_attr(frame.href("/", where.params()))}">'
        "Back to the runs</a></p>"
    )
    return _layout(frame, "Retry runs", body, active="Runs")


def error_page(frame: Frame, status: int, message: str) -> str:
    """A page for a refusal or a missing run: the status and one escaped line."""
    body = (
        f'<div class="head"><h1>{status}</h1></div><p class="big">{text(message)}</p>'
        f'<p><a class="btn plain" href="{_attr(frame.href("/"))}">Back to the runs</a></p>'
    )
    return _layout(frame, str(status), body)
