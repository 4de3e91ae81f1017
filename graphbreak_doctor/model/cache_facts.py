"""Where a diagnosis came from: traced now, or read back from the findings
cache (graphbreak_doctor/jobs/findings_cache.py). Part of the findings
(``Findings.cache``); the renderers say so with ``cache_note``."""

from __future__ import annotations

from dataclasses import dataclass

CACHE_TRACED, CACHE_HIT, CACHE_MIXED = "traced", "cache", "mixed"


@dataclass
class CacheFacts:
    """Where a diagnosis came from: traced now, or read back from the
    findings cache because nothing it read had changed (docs/cache.md)."""

    source: str = CACHE_TRACED  # CACHE_TRACED, CACHE_HIT, or CACHE_MIXED (some of its jobs each way)
    # When the cached findings were traced (UTC, ISO 8601; the oldest of the
    # jobs read back); "" when traced now.
    stored_at: str = ""
    # Traced now and not kept although the cache is on, and why: what the
    # trace read could not all be known (a child process run through a
    # shell, ...); "" otherwise.
    not_kept: str = ""

    def describe(self) -> str:
        """One line for a summary; "" when traced now."""
        if self.source == CACHE_TRACED:
            return ""
        what = "from the findings cache" if self.source == CACHE_HIT else "partly from the findings cache"
        return f"{what} (traced {self.stored_at or 'earlier'}; --no-cache traces again)"

    @classmethod
    def joined(cls, parts: list[CacheFacts | None]) -> CacheFacts | None:
        """The facts of a target whose jobs' findings are ``parts``."""
        known = [p for p in parts if p is not None]
        if not known:
            return None
        hits = [p for p in known if p.source != CACHE_TRACED]
        not_kept = next((p.not_kept for p in known if p.not_kept), "")
        if not hits:
            return cls(not_kept=not_kept)
        source = CACHE_HIT if len(hits) == len(known) and all(p.source == CACHE_HIT for p in hits) else CACHE_MIXED
        return cls(source, min((p.stored_at for p in hits if p.stored_at), default=""), not_kept)


def cache_note(facts: CacheFacts | None) -> str:
    """"" unless a diagnosis came (partly) from the findings cache
    (``findings.cache``): then one line saying so."""
    return facts.describe() if facts is not None else ""


def not_kept_note(facts: CacheFacts | None) -> str:
    """"" unless a diagnosis traced now was not kept in the findings cache
    although the cache is on: then why."""
    return facts.not_kept if facts is not None else ""
