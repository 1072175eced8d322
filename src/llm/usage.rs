//! What a client used and spent: tokens of the replies (fresh or cached, online or batched),
//! network counts, and the totals a budget is checked against before each call.

use super::{Budget, CachedReply, LlmError, Price, Via};
use serde::Serialize;

/// Tokens of the replies a run used, whether fresh or from the cache: the same for every run
/// of the same build, so it belongs in the report. Attempts abandoned on a timeout are counted
/// apart, as an estimate: the server may still have answered and billed them, but never said
/// for how much.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenUsage {
    /// Replies used.
    pub replies: u64,
    /// Their prompt tokens, from the server's `usage`.
    pub prompt_tokens: u64,
    /// Their completion tokens, from the server's `usage`.
    pub completion_tokens: u64,
    /// Attempts abandoned on a timeout.
    pub abandoned: u64,
    /// Their prompt tokens, estimated (cl100k).
    pub abandoned_prompt_tokens: u64,
    /// Their completion tokens at worst (`max_tokens` each).
    pub abandoned_completion_tokens: u64,
    /// Of the replies, those that came through a batch (at the batch price).
    #[serde(skip_serializing_if = "is_zero")]
    pub batch_replies: u64,
    /// Their prompt tokens.
    #[serde(skip_serializing_if = "is_zero")]
    pub batch_prompt_tokens: u64,
    /// Their completion tokens.
    #[serde(skip_serializing_if = "is_zero")]
    pub batch_completion_tokens: u64,
}

#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TokenUsage {
    /// Money for the replies at `price`.
    #[must_use]
    pub fn cost(&self, price: Price) -> f64 {
        price.of(self.prompt_tokens, self.completion_tokens)
    }

    /// Money for the replies at `price`, those that came through a batch at `discount` times
    /// it.
    #[must_use]
    pub fn cost_at(&self, price: Price, discount: f64) -> f64 {
        let online = price.of(
            self.prompt_tokens.saturating_sub(self.batch_prompt_tokens),
            self.completion_tokens.saturating_sub(self.batch_completion_tokens),
        );
        online + price.discounted(discount).of(self.batch_prompt_tokens, self.batch_completion_tokens)
    }

    /// Money the abandoned attempts may have cost at `price`, at worst (an estimate).
    #[must_use]
    pub fn abandoned_cost(&self, price: Price) -> f64 {
        price.of(self.abandoned_prompt_tokens, self.abandoned_completion_tokens)
    }

    /// Tokens of the replies, plus the worst case of the abandoned attempts: what a budget
    /// counts.
    #[must_use]
    pub fn worst_tokens(&self) -> u64 {
        self.prompt_tokens
            + self.completion_tokens
            + self.abandoned_prompt_tokens
            + self.abandoned_completion_tokens
    }

    pub(super) fn add(&mut self, reply: &CachedReply) {
        self.replies += 1;
        self.prompt_tokens += reply.prompt_tokens;
        self.completion_tokens += reply.completion_tokens;
    }

    pub(super) fn add_batched(&mut self, reply: &CachedReply) {
        self.batch_replies += 1;
        self.batch_prompt_tokens += reply.prompt_tokens;
        self.batch_completion_tokens += reply.completion_tokens;
    }

    /// Counts `attempts` abandoned attempts of a request of about `prompt` prompt tokens and
    /// `max_tokens`.
    pub(super) fn abandon(&mut self, attempts: u64, prompt: u32, max_tokens: u32) {
        self.abandoned += attempts;
        self.abandoned_prompt_tokens += attempts * u64::from(prompt);
        self.abandoned_completion_tokens += attempts * u64::from(max_tokens);
    }

    pub(super) fn merge(&mut self, other: &Self) {
        self.replies += other.replies;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.abandoned += other.abandoned;
        self.abandoned_prompt_tokens += other.abandoned_prompt_tokens;
        self.abandoned_completion_tokens += other.abandoned_completion_tokens;
        self.batch_replies += other.batch_replies;
        self.batch_prompt_tokens += other.batch_prompt_tokens;
        self.batch_completion_tokens += other.batch_completion_tokens;
    }
}

/// What this run sent over the network: differs between a first run and a warm rerun.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NetworkStats {
    /// Requests sent (retries included).
    pub requests: u64,
    /// Calls answered from the cache.
    pub cache_hits: u64,
    /// Attempts retried.
    pub retries: u64,
    /// 429 answers received.
    pub rate_limited: u64,
    /// Calls that failed for good.
    pub failures: u64,
    /// Tokens of the replies paid for in this run, and of the attempts it abandoned.
    pub paid: TokenUsage,
    /// Of the replies paid for, those that came through a batch.
    #[serde(skip_serializing_if = "is_zero")]
    pub batched: u64,
}

#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) used: TokenUsage,
    /// Spent before the set's calls (the preflight): counts against the budget, not in the set.
    pub(super) before: TokenUsage,
    /// Worst case of the requests in flight: prompt estimate + `max_tokens` each.
    pub(super) reserved: u64,
    pub(super) network: NetworkStats,
}

impl Totals {
    /// Reserves the worst case of a request (`tokens` = prompt estimate + `max_tokens`), or
    /// refuses it if that could take the spend over `budget`: the limits are hard caps, even
    /// with requests in flight, and count abandoned attempts at their worst. Money is counted
    /// at the price each token is paid at: replies that came through a batch, and a request
    /// `via` a batch, at `discount` times the price; online replies, online requests in flight
    /// and abandoned attempts (always online) at the full price.
    pub(super) fn reserve(
        &mut self,
        budget: Budget,
        discount: f64,
        tokens: u64,
        via: Via,
    ) -> Result<(), LlmError> {
        let used = self.used.worst_tokens() + self.before.worst_tokens();
        let worst = used.saturating_add(self.reserved).saturating_add(tokens);
        if let Some(limit) = budget.max_tokens_total.filter(|limit| worst > *limit) {
            return Err(LlmError::Budget(format!(
                "{used} tokens used (abandoned attempts at their worst included); the next call could \
                 take up to {} more, over --max-tokens-total {limit}",
                worst - used
            )));
        }
        if let (Some(limit), Some(price)) = (budget.max_cost, budget.price) {
            let dearest = price.prompt.max(price.completion);
            let share = match via {
                Via::Online => 1.0,
                Via::Batch => discount,
            };
            let spent = |u: &TokenUsage| u.cost_at(price, discount) + u.abandoned_cost(price);
            let next = (self.reserved as f64 + tokens as f64 * share) * dearest / 1e6;
            let cost = spent(&self.used) + spent(&self.before) + next;
            if cost > limit {
                return Err(LlmError::Budget(format!(
                    "the next call could bring the cost to {cost:.4}, over --max-cost {limit}"
                )));
            }
        }
        self.reserved = self.reserved.saturating_add(tokens);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_count_abandoned_attempts_at_their_worst() {
        let online = |t: &mut Totals, budget, tokens| t.reserve(budget, 0.5, tokens, Via::Online);
        let mut totals = Totals::default();
        totals.used.prompt_tokens = 1_000;
        let budget = Budget { max_tokens_total: Some(2_000), ..Budget::default() };
        assert!(online(&mut totals, budget, 200).is_ok(), "1,000 used + 200 fits in 2,000");
        totals.reserved = 0;
        totals.used.abandon(1, 500, 400);
        let refused = online(&mut totals, budget, 200);
        assert!(
            matches!(&refused, Err(LlmError::Budget(m)) if m.starts_with("1900 tokens used")),
            "{refused:?}"
        );

        let price = Price { prompt: 1.0, completion: 2.0 };
        let budget = Budget { max_cost: Some(0.0025), price: Some(price), ..Budget::default() };
        let mut totals = Totals::default();
        totals.used.prompt_tokens = 1_000;
        totals.used.abandon(1, 500, 400);
        // 1,000 × 1 + (500 × 1 + 400 × 2) = 2,300 per million, and the next call's 100 at 2.
        assert!(online(&mut totals, budget, 100).is_ok());
        totals.reserved = 0;
        assert!(online(&mut totals, budget, 200).is_err(), "2,300 + 400 over 2,500");
    }

    #[test]
    fn a_budget_prices_each_token_at_what_it_is_paid() {
        let price = Price { prompt: 1.0, completion: 2.0 };
        let budget = |max_cost| Budget { max_cost: Some(max_cost), price: Some(price), ..Budget::default() };
        // 1,000 prompt tokens used online: 1,000 × 1 = 1,000 per million, at the full price.
        let mut online = Totals::default();
        online.used.prompt_tokens = 1_000;
        // A batch of 1,000 tokens at the dearest price, halved: 1,000 × 2 × 0.5 = 1,000.
        // 2,000 in all, over 1,800 (discounting the online 1,000 too would make it 1,500).
        assert!(online.reserve(budget(1.8e-3), 0.5, 1_000, Via::Batch).is_err());
        assert!(online.reserve(budget(2.1e-3), 0.5, 1_000, Via::Batch).is_ok(), "2,000 fits in 2,100");
        assert_eq!(online.reserved, 1_000);

        // 1,000 prompt tokens used through a batch: 1,000 × 1 × 0.5 = 500 per million. The next
        // online call of 500 tokens: 500 × 2 = 1,000. 1,500 in all, within 1,600 (at the full
        // price the batch replies would make it 2,000).
        let mut batched = Totals::default();
        batched.used.prompt_tokens = 1_000;
        batched.used.batch_prompt_tokens = 1_000;
        assert!(batched.reserve(budget(1.6e-3), 0.5, 500, Via::Online).is_ok());
        batched.reserved = 0;
        assert!(batched.reserve(budget(1.4e-3), 0.5, 500, Via::Online).is_err(), "1,500 over 1,400");

        // The preflight's online replies are counted at the full price too: 200 × 2 = 400, and
        // 1,000 batch tokens at 1 (at the batch price, the preflight would count 200: 1,200).
        let mut before = Totals::default();
        before.before.completion_tokens = 200;
        assert!(before.reserve(budget(1.3e-3), 0.5, 1_000, Via::Batch).is_err(), "1,400 over 1,300");
    }

    #[test]
    fn a_budget_takes_the_worst_case_of_a_big_run_whole() {
        // Seven billion tokens do not fit in u32: the reservation must not be cut to 4.29e9.
        let budget = Budget { max_tokens_total: Some(6_000_000_000), ..Budget::default() };
        let mut totals = Totals::default();
        assert!(totals.reserve(budget, 0.5, 7_000_000_000, Via::Batch).is_err());
        assert!(totals.reserve(budget, 0.5, 5_000_000_000, Via::Batch).is_ok());
        assert_eq!(totals.reserved, 5_000_000_000);
    }

    #[test]
    fn batch_replies_cost_the_discounted_price() {
        let usage = TokenUsage {
            prompt_tokens: 1_000,
            completion_tokens: 500,
            batch_prompt_tokens: 400,
            batch_completion_tokens: 100,
            ..TokenUsage::default()
        };
        let price = Price { prompt: 1.0, completion: 2.0 };
        // Online: 600 × 1 + 400 × 2 = 1,400; batch: 400 × 0.5 + 100 × 1 = 300 (per million).
        assert!((usage.cost_at(price, 0.5) - 1_700e-6).abs() < 1e-15, "{}", usage.cost_at(price, 0.5));
        assert_eq!(price.discounted(0.5), Price { prompt: 0.5, completion: 1.0 });
    }

    #[test]
    fn without_a_discount_batch_replies_cost_what_online_ones_do_and_each_token_is_priced_once() {
        // Uneven prices and counts: summing the online and batch parts rounds differently from
        // the whole, so costs are compared within a rounding error, never bit for bit.
        let usage = TokenUsage {
            prompt_tokens: 1_234_567,
            completion_tokens: 89_013,
            batch_prompt_tokens: 234_567,
            batch_completion_tokens: 9_013,
            ..TokenUsage::default()
        };
        let price = Price { prompt: 0.15, completion: 0.6 };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(
            close(usage.cost_at(price, 1.0), usage.cost(price)),
            "{} vs {}",
            usage.cost_at(price, 1.0),
            usage.cost(price)
        );
        // At a discount of 0.25: online 1,000,000 × 0.15 + 80,000 × 0.6 = 198,000; batch
        // (234,567 × 0.15 + 9,013 × 0.6) × 0.25 = 10,148.2125 (per million). Pricing the batch
        // tokens online as well (not subtracted) would give 248,741.06; discounting every
        // token, 59,648.21.
        let expected = (198_000.0 + 10_148.212_5) / 1e6;
        assert!(close(usage.cost_at(price, 0.25), expected), "{} vs {expected}", usage.cost_at(price, 0.25));
    }
}
