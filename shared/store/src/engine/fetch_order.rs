//! Which lane and queue a FETCH serves first: a queue's tenants' lanes by turns and
//! weights (ojs-multi-tenancy.md), the queues of a FETCH over several by its scheduling
//! pool's strategy and weights (ojs-fair-scheduling.md), each queue its share of the
//! count in the first pass.

use std::collections::HashMap;

use ojs_core::QueueName;

use crate::claim::FetchRequest;
use crate::engine::Engine;

impl Engine {
    /// The strategy a FETCH over several queues follows: the pool's holding its queues,
    /// else its own; `None` for strict order (or a pool list that cannot be read now: the
    /// FETCH is served in its own order rather than refused).
    pub(crate) async fn scheduling_of(
        &self,
        req: &FetchRequest,
    ) -> Option<ojs_core::pool::Scheduling> {
        let pooled = match self.pool_for(&req.queues).await {
            Ok(pool) => pool.map(|p| p.scheduling),
            Err(e) => {
                tracing::warn!(error = %e, "scheduling pools unread; the FETCH's own order");
                None
            }
        };
        pooled
            .or_else(|| req.scheduling.clone())
            .filter(|s| s.strategy != ojs_core::pool::Strategy::Strict && req.queues.len() > 1)
    }

    /// The lanes of `queue` a FETCH for `scope` reads, in order: one tenant's own; for any
    /// tenant, every lane of the queue starting at the one this instance's turn picks by
    /// the tenants' `weights` (ojs-multi-tenancy.md §7.1-7.2: over any run of turns as
    /// long as the weights' sum, each lane comes first as often as its weight, whatever
    /// its backlog). A queue without tenants has the one lane it had.
    pub(crate) fn fetch_lanes(
        &self,
        queue: &QueueName,
        tenants: &[ojs_core::tenant::TenantId],
        scope: &ojs_core::tenant::Scope,
        weights: &HashMap<String, u64>,
    ) -> Vec<crate::keys::Lane> {
        match scope {
            ojs_core::tenant::Scope::One(tenant) => vec![crate::keys::Lane {
                queue: queue.clone(),
                tenant: tenant.clone(),
            }],
            ojs_core::tenant::Scope::Any => {
                let lanes = crate::keys::Lane::all_of(queue, tenants);
                if lanes.len() < 2 {
                    return lanes;
                }
                let turn = self
                    .lane_turn
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let n = lanes.len();
                let (mut live, quiet): (Vec<_>, Vec<_>) = lanes
                    .into_iter()
                    .partition(|l| !self.quiet_lanes.quiet(l, turn, n));
                let weight = |l: &crate::keys::Lane| {
                    l.tenant
                        .as_ref()
                        .and_then(|t| weights.get(t.as_str()))
                        .copied()
                        .unwrap_or(1)
                };
                let w: Vec<u64> = live.iter().map(weight).collect();
                if !live.is_empty() {
                    live.rotate_left(first_by_weight(&w, turn as u64));
                }
                live.extend(quiet);
                live
            }
        }
    }
}

/// The order a FETCH serves `queues` in, and each queue's share of `count` in its first
/// pass: without `scheduling`, the FETCH's own order and all of the count each; with it,
/// starting at the queue turn `turn` picks by weight, and shares proportional to the
/// weights (at least one each), so one FETCH of several jobs mixes its queues too.
pub(crate) fn queue_order<'q>(
    queues: &'q [QueueName],
    scheduling: Option<&ojs_core::pool::Scheduling>,
    count: usize,
    turn: u64,
) -> (Vec<&'q QueueName>, Vec<usize>) {
    let Some(s) = scheduling else {
        return (queues.iter().collect(), vec![count; queues.len()]);
    };
    let weights: Vec<u64> = queues
        .iter()
        .map(|q| match s.strategy {
            ojs_core::pool::Strategy::Weighted => s.weight_of(q).max(1),
            _ => 1,
        })
        .collect();
    let total: u64 = weights.iter().sum::<u64>().max(1);
    let first = first_by_weight(&weights, turn);
    let mut order: Vec<(&QueueName, usize)> = queues
        .iter()
        .zip(&weights)
        .map(|(q, w)| {
            let share = (count as u64 * w).div_ceil(total).max(1);
            (q, usize::try_from(share).unwrap_or(count))
        })
        .collect();
    order.rotate_left(first);
    order.into_iter().unzip()
}

/// The lane turn `turn` starts at, of lanes weighing `weights`: turns are spread over the
/// weights' sum by a stride prime to it, so every run of `sum` turns gives each lane its
/// weight's count of first places, interleaved rather than in one block.
pub(crate) fn first_by_weight(weights: &[u64], turn: u64) -> usize {
    let total: u64 = weights.iter().map(|w| (*w).max(1)).sum();
    if total == 0 {
        return 0;
    }
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut stride = (total * 618 / 1000).max(1);
    while gcd(stride, total) != 1 {
        stride += 1;
    }
    let mut point = (turn % total) * stride % total;
    for (i, w) in weights.iter().enumerate() {
        let w = (*w).max(1);
        if point < w {
            return i;
        }
        point -= w;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_come_first_as_often_as_their_weight_and_interleaved() {
        for weights in [
            vec![1, 1, 1],
            vec![1, 10, 5],
            vec![3],
            vec![2, 2],
            vec![1, 1000],
        ] {
            let total: u64 = weights.iter().sum();
            let mut firsts = vec![0_u64; weights.len()];
            for turn in 7..7 + total {
                firsts[first_by_weight(&weights, turn)] += 1;
            }
            assert_eq!(firsts, weights, "one cycle of turns");
        }
        // Interleaved: with weights 1 and 1, turns alternate; a heavy lane never holds
        // every turn of a long run while a light one waits a whole cycle.
        let alternate: Vec<usize> = (0..4).map(|t| first_by_weight(&[1, 1], t)).collect();
        assert_eq!(alternate, vec![0, 1, 0, 1]);
        let light = (0..16)
            .filter(|t| first_by_weight(&[1, 10, 5], *t) == 0)
            .count();
        assert!(light >= 1, "the light lane comes first in 16 turns");
        assert_eq!(first_by_weight(&[], 3), 0);
        // The stride is the golden section of the sum (3 of 5), so a heavy lane's first
        // places are spread: 0, 1, 1, 2, 1 rather than 0, 1, 1, 1, 2.
        let spread: Vec<usize> = (0..5).map(|t| first_by_weight(&[1, 3, 1], t)).collect();
        assert_eq!(spread, vec![0, 1, 1, 2, 1]);
    }

    #[test]
    fn a_scheduled_fetch_starts_by_turns_and_shares_its_count() {
        use ojs_core::pool::{Scheduling, Strategy};
        let qs: Vec<QueueName> = ["a", "b", "c"]
            .iter()
            .filter_map(|q| QueueName::parse(q).ok())
            .collect();
        let names = |o: &[&QueueName]| o.iter().map(|q| q.as_str()).collect::<Vec<_>>().join("");
        let (order, shares) = queue_order(&qs, None, 4, 9);
        assert_eq!((names(&order), shares), ("abc".to_owned(), vec![4, 4, 4]));
        let rr = Scheduling {
            strategy: Strategy::RoundRobin,
            weights: Vec::new(),
        };
        let starts: Vec<String> = (0..3)
            .map(|t| names(&queue_order(&qs, Some(&rr), 1, t).0))
            .collect();
        assert_eq!(starts, vec!["abc", "bca", "cab"]);
        assert_eq!(queue_order(&qs, Some(&rr), 4, 0).1, vec![2, 2, 2]);
        let weighted = Scheduling {
            strategy: Strategy::Weighted,
            weights: vec![(qs[0].clone(), 7), (qs[1].clone(), 3)],
        };
        let (order, shares) = queue_order(&qs[..2], Some(&weighted), 10, 0);
        assert_eq!((names(&order), shares), ("ab".to_owned(), vec![7, 3]));
        let firsts = (0..10)
            .filter(|t| queue_order(&qs[..2], Some(&weighted), 1, *t).0[0].as_str() == "a")
            .count();
        assert_eq!(firsts, 7);
    }
}
