//! FETCH's candidate loop over one lane: shard by shard, a page of ready candidates at a
//! time, claimed in index order, moving on when another worker won a candidate (and
//! spreading over the page's first priority when others compete).

use std::ops::Range;

use crate::engine::candidates::Candidate;
use crate::engine::claim_attempt::{Claim, LaneClaim};
use crate::engine::fetching::Fetching;
use crate::engine::Engine;
use crate::error::StoreError;

/// How many times FETCH re-queries a queue whose candidates were all taken by others.
const CLAIM_ROUNDS: usize = 4;
/// Entries a FETCH reads beyond its count: the spare ones it moves on to when a
/// candidate was taken.
const PAGE_SPARE: usize = 8;
/// Entries a FETCH reads beyond its count on a contended queue, to spread over.
const CONTENDED_PAGE_SPARE: usize = 96;
/// Claims a FETCH may lose to other workers on one queue before it moves on. Each lost
/// claim is a failed conditional write (one write unit) that another worker won: when
/// fewer jobs wait than workers race for them, a FETCH that walked its whole page would
/// lose once per job left, while answering with less costs nothing and strands nothing.
const LOSSES_PER_QUEUE: usize = 3;

/// Moves to `from` a candidate picked (by `pick`, from the range it is given) among the
/// ones from `from` on that share `candidates[from]`'s priority. Racing workers so spread
/// over the jobs of the highest priority waiting instead of all writing to its head, and
/// no job of a lower priority goes ahead of it.
fn spread<T>(
    candidates: &mut [T],
    from: usize,
    priority: impl Fn(&T) -> &str,
    pick: impl FnOnce(Range<usize>) -> usize,
) {
    let Some(first) = candidates.get(from) else {
        return;
    };
    let level = priority(first);
    let run = candidates[from..]
        .iter()
        .take_while(|c| priority(c) == level)
        .count();
    if run > 1 {
        let chosen = pick(from..from + run).clamp(from, from + run - 1);
        candidates.swap(from, chosen);
    }
}

/// The priority part of a ready-index sort key.
fn priority_of(c: &Candidate) -> &str {
    c.ready_sk.split('#').next().unwrap_or_default()
}

impl Engine {
    /// Claims from one lane of a queue, up to the request's count. A sharded queue is
    /// walked shard by shard from a random one, so racing workers start apart.
    pub(super) async fn claim_from(
        &self,
        at: &LaneClaim<'_>,
        run: &mut Fetching<'_>,
    ) -> Result<(), StoreError> {
        run.losses_on_queue = 0;
        let shards = self.queue_shards();
        let first = if shards > 1 {
            rand::random_range(0..shards)
        } else {
            0
        };
        for k in 0..shards {
            if run.done(run.target) {
                break;
            }
            let shard = (first + k) % shards;
            let queue_done = self.claim_from_shard(at, shard, run).await?;
            if queue_done {
                break;
            }
        }
        Ok(())
    }

    /// Claims from one shard of a lane. True when the lane is done for this FETCH: its
    /// queue's or its tenant's limit refused a start, or other workers won
    /// [`LOSSES_PER_QUEUE`] claims.
    async fn claim_from_shard(
        &self,
        at: &LaneClaim<'_>,
        shard: u16,
        run: &mut Fetching<'_>,
    ) -> Result<bool, StoreError> {
        let queue = &at.lane.queue;
        if !self
            .quiet_due
            .within(&(queue.clone(), shard), self.config.quiet_due_memory)
        {
            self.promote_due_shard(queue, shard, at.now)
                .await?
                .hand_to(&mut run.owed);
        }
        for _ in 0..CLAIM_ROUNDS {
            if run.done(run.target) {
                break;
            }
            let wanted = run.target.saturating_sub(run.claimed.len());
            let contended = self.contention.recent(queue);
            let spare = if contended {
                CONTENDED_PAGE_SPARE
            } else {
                PAGE_SPARE
            };
            let page = wanted.saturating_add(spare).min(100) as i32;
            let mut candidates = self.ready_candidates(at.lane, shard, page).await?;
            run.saw_candidates |= !candidates.is_empty();
            if !candidates.is_empty() && !run.admits().await? {
                // A quiet, draining or terminating worker is assigned nothing
                // (ojs-graceful-shutdown.md §5.1); looking again would not change that.
                run.saw_ready = true;
                return Ok(true);
            }
            let exhausted = candidates.len() < page as usize;
            // Strict index order holds whenever nobody competes.
            if contended {
                spread(&mut candidates, 0, priority_of, rand::random_range);
            }
            let Some(lost_any) = self.claim_page(at, &mut candidates, run).await? else {
                return Ok(true);
            };
            if run.done(run.target) || exhausted && !lost_any {
                break;
            }
        }
        Ok(false)
    }

    /// Claims a page's candidates in order until the FETCH is done: whether any claim
    /// failed (a round more may find others behind them), or `None` when the lane is done
    /// for this FETCH.
    async fn claim_page(
        &self,
        at: &LaneClaim<'_>,
        candidates: &mut [Candidate],
        run: &mut Fetching<'_>,
    ) -> Result<Option<bool>, StoreError> {
        let queue = &at.lane.queue;
        let mut lost_any = false;
        let mut next = 0;
        while next < candidates.len() && !run.out_of_time() {
            let outcome = self.attempt(at, &candidates[next], run).await?;
            next += 1;
            // Only entries that left `available` before this FETCH began (or were set
            // aside) mean the index has not caught up; anything else is a queue that
            // was answered.
            run.saw_ready |= !matches!(outcome, Claim::Stale);
            match outcome {
                Claim::Won(job) => run.won(*job),
                Claim::Stale | Claim::Expired => lost_any = true,
                // Not a competitor, so not counted as one; but a page of waiting jobs
                // is read past (wider, from a random one of its priority) by the next
                // round, or a job with no limit behind them would wait with them.
                Claim::Refused => {
                    lost_any = true;
                    self.contention.lost_on(queue);
                    spread(candidates, next, priority_of, rand::random_range);
                }
                Claim::Lost => {
                    lost_any = true;
                    self.contention.lost_on(queue);
                    run.losses_on_queue += 1;
                    if run.losses_on_queue >= LOSSES_PER_QUEUE {
                        return Ok(None);
                    }
                    // Other workers are taking this page head first: try another of
                    // the same priority next instead of following them down the list.
                    spread(candidates, next, priority_of, rand::random_range);
                }
                Claim::QueueLimited => {
                    run.queue_limited = true;
                    return Ok(None);
                }
                Claim::TenantLimited => return Ok(None),
            }
            if run.done(run.target) {
                break;
            }
        }
        Ok(Some(lost_any))
    }

    /// One candidate of a page claimed, unless this FETCH already holds it. A job the
    /// server can no longer read is set aside instead.
    async fn attempt(
        &self,
        at: &LaneClaim<'_>,
        c: &Candidate,
        run: &mut Fetching<'_>,
    ) -> Result<Claim, StoreError> {
        // An entry of a job this FETCH claimed in an earlier round, still listed
        // behind the index's lag: not another worker's competition (taken for
        // one, it would reorder the rest of the page), and not worth a write.
        let ours = run.claimed.iter().any(|j| j.id == c.id);
        let claimed_as_stored = match &c.unreadable {
            _ if ours => Ok(Claim::Stale),
            Some(why) => Err(StoreError::Corrupt(why.clone())),
            None => {
                run.attempts += 1;
                let claimed = self.claim(at, c, &mut run.full_limits).await;
                claimed.map(|m| m.hand_to(&mut run.owed))
            }
        };
        match claimed_as_stored {
            // A job the server can no longer read never blocks the queue. It was
            // never deliverable and nobody competed for it: like an entry the
            // index still lists, it answers nothing, so a FETCH that saw only such
            // jobs looks again for a just-pushed one behind them.
            Err(StoreError::Corrupt(why)) => {
                self.set_aside(&c.id, &why).await;
                Ok(Claim::Stale)
            }
            other => other,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::{time, JobId};

    fn level<'a>(c: &'a &str) -> &'a str {
        c.split('#').next().unwrap_or_default()
    }

    /// `order` spread from `from` picking the last candidate offered: the range offered
    /// and the order after.
    fn spread_to_last<const N: usize>(
        mut order: [&str; N],
        from: usize,
    ) -> (Option<Range<usize>>, [&str; N]) {
        let mut offered = None;
        spread(&mut order, from, level, |r| {
            offered = Some(r.clone());
            r.end - 1
        });
        (offered, order)
    }

    #[test]
    fn spread_picks_only_among_the_first_priority() {
        let (offered, order) = spread_to_last(["1#a", "1#b", "1#c", "2#d", "2#e"], 0);
        assert_eq!(offered, Some(0..3));
        assert_eq!(order, ["1#c", "1#b", "1#a", "2#d", "2#e"]);
    }

    #[test]
    fn spread_from_the_middle_keeps_what_came_before() {
        let (offered, order) = spread_to_last(["1#a", "1#b", "1#c", "1#d", "2#e"], 2);
        assert_eq!(offered, Some(2..4));
        assert_eq!(order, ["1#a", "1#b", "1#d", "1#c", "2#e"]);
    }

    #[test]
    fn spread_leaves_a_lone_candidate_and_an_empty_page_alone() {
        let mut order = ["1#a", "2#b", "2#c"];
        spread(&mut order, 0, level, |_| panic!("nothing to pick from"));
        assert_eq!(order, ["1#a", "2#b", "2#c"]);
        let mut empty: [&str; 0] = [];
        spread(&mut empty, 0, level, |_| panic!("nothing to pick from"));
        spread(&mut order, 3, level, |_| panic!("nothing to pick from"));
        // A pick outside the range it was given still stays within the priority.
        let mut order = ["1#a", "1#b", "2#c"];
        spread(&mut order, 0, level, |_| 7);
        assert_eq!(order, ["1#b", "1#a", "2#c"]);
    }

    #[test]
    fn a_candidates_priority_is_its_sort_keys_first_part() {
        let id =
            JobId::parse("01a20f62-cb55-7106-98fc-771d12482429").unwrap_or_else(|e| panic!("{e}"));
        let sk = crate::keys::ready_sk(7, &time::now(), &id);
        let c = Candidate::for_push(id, sk.clone(), None, None);
        assert_eq!(priority_of(&c), sk.split('#').next().unwrap_or("?"));
        assert_eq!(priority_of(&c).len(), 3, "{sk}");
        let other =
            Candidate::for_push(id, crate::keys::ready_sk(8, &time::now(), &id), None, None);
        assert_ne!(priority_of(&c), priority_of(&other));
    }
}
