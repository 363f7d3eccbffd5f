"""Fault injection against the whole system: real processes, real signals, outcomes counted."""
