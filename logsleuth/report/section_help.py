"""One sentence per report section, for readers who do not know NCCL."""

from __future__ import annotations

SECTION_HELP = {
    "overview": (
        "The job as the logs describe it: how many processes (ranks) it had, on which "
        "machines, with which library versions, and the time span the logs cover."
    ),
    "progress": (
        "NCCL numbers the collective operations (AllReduce, AllGather, ...) of each "
        "communicator in order (opCount); every member must reach the same number. Ranks "
        "whose last logged operation is behind the others are the laggards: the others are "
        "waiting for them."
    ),
    "timeline": (
        "The first error each process logged, in time order, with identical messages from "
        "many ranks counted once; the earliest error is usually closest to the cause, later "
        "ones are often consequences (timeouts, aborts)."
    ),
    "config": (
        "Versions, network choices and NCCL_* environment variables as each process logged "
        "them; ranks of one job should agree, and a value that differs is a common cause of "
        "hangs and crashes."
    ),
    "verdict": (
        "The most likely root cause, with the process to look at first; everything below "
        "is the evidence for it."
    ),
    "story": (
        "Who timed out or got stuck, whom each process waited for and why, down to the "
        "process where the waiting ends: that one is the cause, the others are its victims."
    ),
    "evidence": (
        "The input lines that support the verdict, quoted exactly as they appear in the "
        "files so that you can find them again."
    ),
    "findings": (
        "Everything the rules noticed, grouped by kind; critical and error findings explain "
        "a failure, warning and info findings are worth fixing but did not stop the job."
    ),
    "ranks": (
        "A rank is one process of the training job (usually one per GPU); this table shows "
        "where each one was when its logs end."
    ),
    "stacks": (
        "Ranks whose Python call stacks are identical are grouped together; a small group "
        "that differs from the rest is usually where the problem is. The tree merges all "
        "stacks from the outermost frame in, and splits where ranks went different ways."
    ),
    "communicators": (
        "A communicator is a group of ranks that NCCL (NVIDIA's GPU communication library) "
        "runs collective operations on; every member must issue the same operations in the "
        "same order, or the others wait forever."
    ),
    "inputs": (
        "Every input line is accounted for: recognized lines became events, unrecognized "
        "lines were read but not understood, blank lines carried nothing."
    ),
    "gaps": (
        "What the evidence does not cover; each gap limits how sure the verdict can be and "
        "says what to collect next time."
    ),
}
"""One sentence per report section for readers who do not know NCCL."""
