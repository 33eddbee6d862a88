"""What each user has pending on this node, for the ACL quotas
(``quota-jobs``, ``quota-bytes``; docs/rate-limits.md "Quotas per user").

A job counts for the user whose ADDJOB created it here, from then until
this node acknowledges or forgets it (``JobLifecycle`` releases it: ack,
deletion, expiry, eviction, a move). Only users with a quota are counted,
so a node without quotas keeps nothing here. Nothing of this is stored:
the AOF does not record who added a job, and the counts start from zero
at each start.
"""

from __future__ import annotations

from disque.jobs.job import Job


class QuotaAccount:
    """One user's pending jobs and their body bytes on this node."""

    __slots__ = ("jobs", "bytes")

    def __init__(self) -> None:
        self.jobs = 0
        self.bytes = 0


class QuotaLedger:
    """Accounts by user name, and the account each counted job is charged to.
    ``active``: some user has a quota (ACL SETUSER and the config set it),
    the one test ADDJOB makes when none has."""

    __slots__ = ("active", "accounts", "charged")

    def __init__(self) -> None:
        self.active = False
        self.accounts: dict[bytes, QuotaAccount] = {}
        self.charged: dict[Job, QuotaAccount] = {}

    def account(self, user: bytes) -> QuotaAccount:
        """The account of ``user`` (created empty)."""
        account = self.accounts.get(user)
        if account is None:
            account = self.accounts[user] = QuotaAccount()
        return account

    def charge(self, job: Job, account: QuotaAccount) -> None:
        """``job`` was just created here for the account's user."""
        body = job.body
        account.jobs += 1
        account.bytes += len(body) if body is not None else 0
        self.charged[job] = account

    def release(self, job: Job) -> None:
        """``job`` no longer counts (acked or gone); nothing if it was not charged."""
        account = self.charged.pop(job, None)
        if account is not None:
            body = job.body
            account.jobs -= 1
            account.bytes -= len(body) if body is not None else 0
