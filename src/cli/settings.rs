//! The settings a build can take from flags, the environment or a TOML config file, and their
//! resolution into the library's [`BuildConfig`]. Flags (and `OPENAI_BASE_URL`,
//! `QRELGEN_MODEL`) override the file; the file overrides the defaults.

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use qrelgen::BuildConfig;
use qrelgen::chunk::{ChunkConfig, SizeUnit};
use qrelgen::config::{GeneratorConfig, LlmSetup};
use qrelgen::filter::{FilterConfig, Gate, HopRule, OnCopy, OnMiss};
use qrelgen::generate::{JsonMode, LlmGeneration, Mix, TopicConfig, parse_shares};
use qrelgen::index::Segmenter;
use qrelgen::judge::{JudgeConfig, OnAnswered};
use qrelgen::llm::{Budget, Endpoint, LimitConfig, LlmConfig, Price, RetryPolicy};
use qrelgen::runs::PoolRunConfig;
use qrelgen::sample::SampleConfig;
use qrelgen::text::Language;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The version of the config file format this build reads.
pub const CONFIG_SCHEMA_VERSION: u32 = 1;

macro_rules! settings {
    ($( $(#[$meta:meta])* $name:ident : $ty:ty ),* $(,)?) => {
        /// Settings that flags, the environment and the config file can give.
        #[derive(Debug, Default, Args, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Settings {
            /// Config file format version (config file only; must be 1).
            #[arg(skip)]
            schema_version: Option<u32>,
            $( $(#[$meta])* $name: Option<$ty>, )*
        }

        impl Settings {
            /// These settings, with gaps filled from `file`.
            fn or(self, file: Settings) -> Settings {
                Settings { schema_version: file.schema_version, $( $name: self.$name.or(file.$name), )* }
            }

            /// The flags of the settings given (`--top-n`, …), in declaration order.
            pub fn given(&self) -> Vec<String> {
                let mut given = Vec::new();
                $( if self.$name.is_some() { given.push(format!("--{}", stringify!($name).replace('_', "-"))); } )*
                given
            }
        }
    };
}

settings! {
    /// Largest chunk, in --chunk-unit units [default: 1000; 400 for Chinese documents].
    #[arg(long, value_name = "N", help_heading = "Chunking")]
    chunk_size: usize,
    /// Overlap between neighbouring chunks [default: 100; 40 for Chinese documents].
    #[arg(long, value_name = "N", help_heading = "Chunking")]
    chunk_overlap: usize,
    /// Largest chunk of a Chinese document (a config file key, recorded by every build so that a
    /// refresh chunks as the build did; no flag: --chunk-size sets both) [default: --chunk-size,
    /// else 400].
    #[arg(skip)]
    chunk_size_zh: usize,
    /// Overlap between neighbouring chunks of a Chinese document (a config file key, like
    /// `chunk_size_zh`) [default: --chunk-overlap, else 40].
    #[arg(skip)]
    chunk_overlap_zh: usize,
    /// What chunk sizes count: characters or cl100k_base tokens [default: chars].
    #[arg(long, value_enum, help_heading = "Chunking")]
    chunk_unit: UnitArg,
    /// How Chinese text is split into BM25 terms: jieba words, or overlapping character pairs
    /// [default: jieba].
    #[arg(long, value_enum, help_heading = "Chunking")]
    cjk_segmenter: SegmenterArg,
    /// Queries wanted in the test set [default: 100].
    #[arg(long, value_name = "N", help_heading = "Queries")]
    queries: usize,
    /// Share of each query type; shares add up to 1
    /// [default: direct=0.4,paraphrase=0.3,multi_hop=0.15,no_answer=0.15].
    #[arg(long, value_name = "TYPE=SHARE,…", help_heading = "Queries")]
    mix: String,
    /// Most queries per document, so a few long files don't dominate [default: twice a fair
    /// share, at least 2].
    #[arg(long, value_name = "N", help_heading = "Queries")]
    per_doc_cap: usize,
    /// Seed of every random draw: same corpus, settings and seed give identical files [default: 42].
    #[arg(long, help_heading = "Queries")]
    seed: u64,
    /// Generation rounds at most; later rounds top up types that fell short [default: 5].
    #[arg(long, value_name = "N", help_heading = "Queries")]
    max_rounds: u32,
    /// Language of the queries: en, zh, or auto for the corpus language (detected per document,
    /// by characters) [default: auto].
    #[arg(long, value_enum, help_heading = "Queries")]
    language: LanguageArg,
    /// A query's source must rank within the top N of a BM25 search with it [default: 10].
    #[arg(long, value_name = "N", help_heading = "Round-trip filter")]
    top_n: usize,
    /// A query whose source misses the top N: drop it, or keep it flagged for review; with
    /// `--gate judge`, a query whose source the judge says does not answer it [default: drop].
    #[arg(long, value_enum, help_heading = "Round-trip filter")]
    on_miss: OnMissArg,
    /// What decides whether a query stays: `judge`, the LLM judge grades its source (BM25 ranks
    /// are only measured, so the set does not favour what BM25 finds), or `round-trip`, its
    /// source must rank within --top-n [default: judge with an LLM, round-trip offline].
    #[arg(long, value_enum, help_heading = "Round-trip filter")]
    gate: GateArg,
    /// Which hops of a multi_hop query must rank within the top N [default: all].
    #[arg(long, value_enum, help_heading = "Round-trip filter")]
    multi_hop_rule: HopRuleArg,
    /// Chunks in each query's pool: the top hits besides its sources, shown to reviewers and
    /// graded by the judge with --judge-pool; the LLM judge checks no_answer queries against
    /// this many top hits [default: 5, or --judge-pool when that is more].
    #[arg(long, value_name = "N", help_heading = "Round-trip filter")]
    pool_depth: usize,
    /// Drop a query whose words (Chinese: character pairs) overlap a query already in the set
    /// at least this much, by Jaccard similarity; 1 drops only copies [default: 0.8].
    #[arg(long, value_name = "0..1", help_heading = "Round-trip filter")]
    dedup_threshold: f64,
    /// A paraphrase sharing more than this share of its content terms with its source copies
    /// it [default: 0.6].
    #[arg(long, value_name = "0..1", help_heading = "Quality controls")]
    max_paraphrase_overlap: f64,
    /// A paraphrase that copies its source: keep it as a direct query, or drop it
    /// [default: relabel].
    #[arg(long, value_enum, help_heading = "Quality controls")]
    on_copy: OnCopyArg,
    /// Chunks at least this alike (Jaccard of their 3-word shingles) are copies of each other:
    /// all relevant to a query written from one, any of them found by the round trip
    /// [default: 0.9].
    #[arg(long, value_name = "0..1", help_heading = "Quality controls")]
    chunk_dup_threshold: f64,
    /// Have the LLM judge grade the first K chunks of each query's pool 0–3; grades ≥ 1 become
    /// extra qrels rows (provenance "judge"). At most --pool-depth, which it raises when that is
    /// not given [default: 0, no pool judging].
    #[arg(long, value_name = "K", help_heading = "Quality controls")]
    judge_pool: usize,
    /// A TREC run file (`qid Q0 docid rank score tag`) of a retriever you want to compare, for
    /// the queries of an earlier build with the same settings (same seed: same query ids);
    /// repeat for each system. After the build, `qrelgen pool` runs on the set with these runs
    /// (the build's LLM judge, or the one-shot labeller offline): the queries are those of a
    /// build without them [default: none].
    #[arg(long, value_name = "RUN", help_heading = "Quality controls")]
    pool_run: Vec<PathBuf>,
    /// Chunks of each --pool-run run pooled per query [default: 20].
    #[arg(long, value_name = "K", help_heading = "Quality controls")]
    pool_run_depth: usize,
    /// Offline generator: at most this many chunks on a query's topic (the closest to its
    /// sources in the corpus's latent topic space) are relevant to it, with its sources, all
    /// grade 1; 0 grades only the sources, as known-item queries [default: 50].
    #[arg(long, value_name = "N", help_heading = "Quality controls")]
    topic_labels: usize,
    /// Offline generator: the cosine in the topic space a chunk needs to be on a source's
    /// topic [default: 0.5].
    #[arg(long, value_name = "-1..1", help_heading = "Quality controls")]
    topic_min_cosine: f32,
    /// Keep a no_answer query that the judge finds answered in the corpus, as a direct query
    /// with the answering chunks relevant, beyond the quotas [default: false: drop it].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", help_heading = "Quality controls")]
    reclassify: bool,
    /// Queries in the review queue (stratified by type, flagged first) [default: 50].
    #[arg(long, value_name = "N", help_heading = "Review queue")]
    review_size: usize,
    /// Review-queue items per query type at least, so rare types appear [default: 5].
    #[arg(long, value_name = "N", help_heading = "Review queue")]
    review_min_per_type: usize,
    /// Who writes the queries: an LLM, the offline simulator, or llm when an endpoint is
    /// configured [default: auto].
    #[arg(long, value_enum, help_heading = "LLM")]
    generator: GeneratorArg,
    /// Base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8080/v1. The API key is read
    /// from OPENAI_API_KEY (optional for local servers) [default: none: the offline generator
    /// writes the queries].
    #[arg(long, env = "OPENAI_BASE_URL", hide_env_values = true, value_name = "URL", help_heading = "LLM")]
    base_url: String,
    /// Model name [default: none; needed with --base-url].
    #[arg(long, env = "QRELGEN_MODEL", hide_env_values = true, help_heading = "LLM")]
    model: String,
    /// Prompt template folder [default: the bundled prompts/].
    #[arg(long, value_name = "DIR", help_heading = "LLM")]
    prompts: PathBuf,
    /// Share of each query style (names from prompts/<lang>/styles.md)
    /// [default: question=0.5,keyword=0.3,colloquial=0.2].
    #[arg(long, value_name = "STYLE=SHARE,…", help_heading = "LLM")]
    styles: String,
    /// How to ask for JSON [default: the best the server accepts, found by the preflight].
    #[arg(long, value_enum, help_heading = "LLM")]
    json_mode: JsonModeArg,
    /// Re-asks after an unusable reply [default: 2].
    #[arg(long, value_name = "N", help_heading = "LLM")]
    repairs: u32,
    /// Queries asked for in one call (the chunk is sent once for all) [default: 4].
    #[arg(long, value_name = "N", help_heading = "LLM")]
    queries_per_call: usize,
    /// Requests in flight at most, retries included [default: 4].
    #[arg(long, value_name = "N", help_heading = "LLM")]
    concurrency: usize,
    /// Requests per minute at most (paced evenly) [default: none; the pace adapts to the
    /// server's rate-limit headers and 429s].
    #[arg(long, value_name = "N", help_heading = "LLM")]
    rpm: u32,
    /// Tokens (prompt + completion) per minute at most [default: none, or the server's
    /// x-ratelimit-limit-tokens].
    #[arg(long, value_name = "N", help_heading = "LLM")]
    tpm: u32,
    /// Seconds to wait for one reply before retrying [default: 300, for slow local models].
    #[arg(long, value_name = "SECONDS", help_heading = "LLM")]
    timeout: u64,
    /// Attempts per call for 5xx, timeouts and connection errors; 429s are retried without
    /// limit [default: 6].
    #[arg(long, value_name = "N", help_heading = "LLM")]
    attempts: u32,
    /// Stop when no call has finished for this long [default: 3 × --timeout].
    #[arg(long, value_name = "SECONDS", help_heading = "LLM")]
    stall_timeout: u64,
    /// max_tokens of each call [default: 1500].
    #[arg(long, value_name = "N", help_heading = "LLM")]
    max_tokens: u32,
    /// Sampling temperature [default: 0.7].
    #[arg(long, help_heading = "LLM")]
    temperature: f32,
    /// Reply cache (SQLite) [default: OUT/llm-cache.sqlite]; share one across builds.
    #[arg(long, value_name = "FILE", help_heading = "LLM")]
    cache: PathBuf,
    /// Stop cleanly (exit 3) once the replies used reach this many tokens [default: no limit].
    #[arg(long, value_name = "N", help_heading = "Budget")]
    max_tokens_total: u64,
    /// Stop cleanly (exit 3) once the replies used cost this much (needs the prices)
    /// [default: no limit].
    #[arg(long, value_name = "AMOUNT", help_heading = "Budget")]
    max_cost: f64,
    /// Price of a million prompt tokens, for the report and --max-cost [default: none: the report
    /// shows tokens, not money].
    #[arg(long, value_name = "AMOUNT", help_heading = "Budget")]
    price_prompt: f64,
    /// Price of a million completion tokens, for the report and --max-cost [default: none].
    #[arg(long, value_name = "AMOUNT", help_heading = "Budget")]
    price_completion: f64,
}

#[derive(Debug, Clone, Copy, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitArg {
    Chars,
    Tokens,
}

#[derive(Debug, Clone, Copy, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnMissArg {
    Drop,
    Flag,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateArg {
    Judge,
    #[serde(alias = "round-trip")]
    RoundTrip,
}

#[derive(Debug, Clone, Copy, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnCopyArg {
    Relabel,
    Drop,
}

#[derive(Debug, Clone, Copy, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HopRuleArg {
    All,
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GeneratorArg {
    Auto,
    Llm,
    Offline,
}

#[derive(Debug, Clone, Copy, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LanguageArg {
    Auto,
    En,
    Zh,
}

#[derive(Debug, Clone, Copy, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmenterArg {
    Jieba,
    Bigram,
}

#[derive(Debug, Clone, Copy, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonModeArg {
    #[value(name = "json_schema")]
    #[serde(rename = "json_schema")]
    Schema,
    #[value(name = "json_object")]
    #[serde(rename = "json_object")]
    Object,
    Plain,
}

/// What the command line gives besides [`Settings`].
pub struct Inputs<'a> {
    /// `--corpus`.
    pub corpus: &'a Path,
    /// `--prechunked`.
    pub prechunked: bool,
    /// `--dry-run`.
    pub dry_run: bool,
    /// `OPENAI_API_KEY`.
    pub api_key: Option<String>,
}

impl Settings {
    /// Reads a config file.
    ///
    /// # Errors
    /// When the file cannot be read, is not TOML, has unknown keys or another schema version.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = fs_err::read_to_string(path)?;
        let settings: Self =
            toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))?;
        match settings.schema_version {
            Some(CONFIG_SCHEMA_VERSION) => Ok(settings),
            Some(other) => bail!(
                "{}: schema_version {other} is not supported (this qrelgen reads {CONFIG_SCHEMA_VERSION})",
                path.display()
            ),
            None => bail!("{}: add `schema_version = {CONFIG_SCHEMA_VERSION}` at the top", path.display()),
        }
    }

    /// Flags first, then `file`.
    #[must_use]
    pub fn over(self, file: Option<Settings>) -> Settings {
        match file {
            Some(mut file) => {
                // One --chunk-size (--chunk-overlap) sets the Chinese one too, over the file's.
                if self.chunk_size.is_some() {
                    file.chunk_size_zh = None;
                }
                if self.chunk_overlap.is_some() {
                    file.chunk_overlap_zh = None;
                }
                self.or(file)
            }
            None => self,
        }
    }

    /// Whether an endpoint is configured, so `--generator auto` means llm.
    fn wants_llm(&self) -> bool {
        match self.generator.unwrap_or(GeneratorArg::Auto) {
            GeneratorArg::Llm => true,
            GeneratorArg::Offline => false,
            GeneratorArg::Auto => self.base_url.is_some(),
        }
    }

    /// The gate: the judge when an LLM is there, unless told otherwise.
    fn gate(&self) -> Gate {
        match self.gate {
            Some(GateArg::Judge) => Gate::Judge,
            None if self.wants_llm() => Gate::Judge,
            Some(GateArg::RoundTrip) | None => Gate::RoundTrip,
        }
    }

    /// The language asked for, if any.
    pub fn language(&self) -> Option<Language> {
        self.language.and_then(|l| match l {
            LanguageArg::Auto => None,
            LanguageArg::En => Some(Language::En),
            LanguageArg::Zh => Some(Language::Zh),
        })
    }

    /// The prompt folder asked for, if any.
    pub fn prompts_dir(&self) -> Option<&Path> {
        self.prompts.as_deref()
    }

    /// Resolves the settings into the library's config.
    ///
    /// # Errors
    /// For an invalid `--mix` or `--styles`, or `--generator llm` without an endpoint or model.
    pub fn resolve(&self, inputs: Inputs<'_>) -> anyhow::Result<BuildConfig> {
        self.validate()?;
        let mix = match &self.mix {
            Some(spec) => spec.parse::<Mix>().map_err(|e| anyhow::anyhow!("invalid --mix: {e}"))?,
            None => Mix::default(),
        };
        let generator = if self.wants_llm() {
            GeneratorConfig::Llm(Box::new(self.llm_setup(inputs.api_key)?))
        } else {
            GeneratorConfig::Offline
        };
        Ok(BuildConfig {
            corpus: inputs.corpus.to_owned(),
            prechunked: inputs.prechunked,
            chunking: {
                let defaults = ChunkConfig::with_sizes(self.chunk_size, self.chunk_overlap);
                ChunkConfig {
                    size_zh: self.chunk_size_zh.unwrap_or(defaults.size_zh),
                    overlap_zh: self.chunk_overlap_zh.unwrap_or(defaults.overlap_zh),
                    unit: match self.chunk_unit.unwrap_or(UnitArg::Chars) {
                        UnitArg::Chars => SizeUnit::Chars,
                        UnitArg::Tokens => SizeUnit::Tokens,
                    },
                    ..defaults
                }
            },
            segmenter: match self.cjk_segmenter.unwrap_or(SegmenterArg::Jieba) {
                SegmenterArg::Jieba => Segmenter::Jieba,
                SegmenterArg::Bigram => Segmenter::Bigram,
            },
            queries: self.queries.unwrap_or(100),
            mix,
            per_doc_cap: self.per_doc_cap,
            seed: self.seed.unwrap_or(42),
            max_rounds: self.max_rounds.unwrap_or(5),
            filter: self.filter_config(),
            dedup_threshold: self.dedup_threshold.unwrap_or(0.8),
            chunk_dup_threshold: self.chunk_dup_threshold.unwrap_or(0.9),
            judge: JudgeConfig {
                gate: (self.gate() == Gate::Judge).then_some(self.filter_config().on_miss),
                pool: self.judge_pool.unwrap_or(0),
                on_answered: if self.reclassify == Some(true) {
                    OnAnswered::Reclassify
                } else {
                    OnAnswered::Drop
                },
            },
            topics: TopicConfig {
                labels: self.topic_labels.unwrap_or(TopicConfig::default().labels),
                min_cosine: self.topic_min_cosine.unwrap_or(TopicConfig::default().min_cosine),
            },
            pool_runs: PoolRunConfig {
                files: self.pool_run.clone().unwrap_or_default(),
                depth: self.pool_run_depth.unwrap_or(qrelgen::pool::DEFAULT_DEPTH),
            },
            review: SampleConfig {
                size: self.review_size.unwrap_or(50),
                min_per_type: self.review_min_per_type.unwrap_or(5),
            },
            generator,
            language: self.language(),
            dry_run: inputs.dry_run,
            threads: qrelgen::config::all_cores().get(),
        })
    }

    /// Rejects values no build can use, naming the flag (the first one, in this order).
    fn validate(&self) -> anyhow::Result<()> {
        self.check_counts()?;
        self.check_ranges()?;
        self.check_pools()?;
        self.check_amounts()
    }

    /// Counts, sizes and durations are at least 1.
    fn check_counts(&self) -> anyhow::Result<()> {
        for (flag, value) in [
            ("--queries", self.queries),
            ("--per-doc-cap", self.per_doc_cap),
            ("--top-n", self.top_n),
            ("--chunk-size", self.chunk_size),
            ("chunk_size_zh", self.chunk_size_zh),
            ("--max-rounds", self.max_rounds.map(|r| r as usize)),
            ("--queries-per-call", self.queries_per_call),
            ("--concurrency", self.concurrency),
            ("--rpm", self.rpm.map(|n| n as usize)),
            ("--tpm", self.tpm.map(|n| n as usize)),
            ("--timeout", self.timeout.map(|n| n as usize)),
            ("--stall-timeout", self.stall_timeout.map(|n| n as usize)),
            ("--attempts", self.attempts.map(|n| n as usize)),
            ("--max-tokens", self.max_tokens.map(|n| n as usize)),
        ] {
            if value == Some(0) {
                bail!("invalid {flag}: must be at least 1");
            }
        }
        Ok(())
    }

    /// Similarities, shares and cosines are within their ranges.
    fn check_ranges(&self) -> anyhow::Result<()> {
        for (flag, value) in
            [("--dedup-threshold", self.dedup_threshold), ("--chunk-dup-threshold", self.chunk_dup_threshold)]
        {
            if value.is_some_and(|t| !(t > 0.0 && t <= 1.0)) {
                bail!("invalid {flag}: must be above 0 and at most 1");
            }
        }
        if self.max_paraphrase_overlap.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
            bail!("invalid --max-paraphrase-overlap: must be between 0 and 1");
        }
        if self.topic_min_cosine.is_some_and(|c| !(-1.0..=1.0).contains(&c)) {
            bail!("invalid --topic-min-cosine: a cosine is between -1 and 1");
        }
        Ok(())
    }

    /// Pools that would hold nothing, and judge settings without the LLM judge.
    fn check_pools(&self) -> anyhow::Result<()> {
        if self.pool_run.as_ref().is_some_and(|runs| !runs.is_empty()) && self.pool_run_depth == Some(0) {
            bail!("invalid --pool-run-depth 0: it would pool nothing from the runs\nhint: use 1 or more");
        }
        if self.wants_llm() && self.pool_depth == Some(0) {
            bail!(
                "invalid --pool-depth 0 with the LLM judge: it checks no_answer queries against the top chunks\nhint: use --pool-depth 1 or more"
            );
        }
        let judged = self.judge_pool.is_some_and(|k| k > 0) || self.reclassify == Some(true);
        if !self.wants_llm() && (judged || self.gate == Some(GateArg::Judge)) {
            bail!(
                "--judge-pool, --reclassify and --gate judge need the LLM judge\nhint: pass --base-url and --model (or set OPENAI_BASE_URL and QRELGEN_MODEL)"
            );
        }
        if let (Some(k), Some(depth)) = (self.judge_pool, self.pool_depth)
            && k > depth
        {
            bail!(
                "invalid --judge-pool {k}: it grades the first K chunks of a pool of --pool-depth {depth}\nhint: raise --pool-depth to {k}, or leave it out (it then follows --judge-pool)"
            );
        }
        Ok(())
    }

    /// The temperature, budgets and prices are finite and not negative.
    fn check_amounts(&self) -> anyhow::Result<()> {
        for (flag, value) in [
            ("--temperature", self.temperature.map(f64::from)),
            ("--max-cost", self.max_cost),
            ("--price-prompt", self.price_prompt),
            ("--price-completion", self.price_completion),
        ] {
            if value.is_some_and(|v| !v.is_finite() || v < 0.0) {
                bail!("invalid {flag}: must be a number ≥ 0");
            }
        }
        Ok(())
    }

    /// The round trip and the lexical controls.
    fn filter_config(&self) -> FilterConfig {
        FilterConfig {
            top_n: self.top_n.unwrap_or(10),
            on_miss: match self.on_miss.unwrap_or(OnMissArg::Drop) {
                OnMissArg::Drop => OnMiss::Drop,
                OnMissArg::Flag => OnMiss::Flag,
            },
            gate: self.gate(),
            multi_hop_rule: match self.multi_hop_rule.unwrap_or(HopRuleArg::All) {
                HopRuleArg::All => HopRule::All,
                HopRuleArg::Any => HopRule::Any,
            },
            pool_depth: self.pool_depth.unwrap_or(5).max(self.judge_pool.unwrap_or(0)),
            max_paraphrase_overlap: self.max_paraphrase_overlap.unwrap_or(0.6),
            on_copy: match self.on_copy.unwrap_or(OnCopyArg::Relabel) {
                OnCopyArg::Relabel => OnCopy::Relabel,
                OnCopyArg::Drop => OnCopy::Drop,
            },
        }
    }

    /// The LLM generator's settings: the endpoint, the calls, the generation.
    fn llm_setup(&self, api_key: Option<String>) -> anyhow::Result<LlmSetup> {
        let endpoint = self.endpoint(api_key)?;
        let styles =
            parse_shares(self.styles.as_deref().unwrap_or("question=0.5,keyword=0.3,colloquial=0.2"))
                .map_err(|e| anyhow::anyhow!("invalid --styles: {e}"))?;
        let price = self.price()?;
        // A day is plenty for one reply, and keeps the arithmetic below far from overflow.
        let timeout = Duration::from_secs(self.timeout.unwrap_or(300).clamp(1, 86_400));
        Ok(LlmSetup {
            llm: self.llm_config(endpoint, timeout, price),
            generation: self.generation(styles, timeout),
            prompts: self.prompts.clone(),
            cache: self.cache.clone(),
        })
    }

    /// The endpoint: `--base-url` and `--model` are needed, the key is optional.
    fn endpoint(&self, api_key: Option<String>) -> anyhow::Result<Endpoint> {
        let Some(base_url) = self.base_url.clone() else {
            bail!(
                "--generator llm needs an endpoint\nhint: pass --base-url (or set OPENAI_BASE_URL), e.g. https://api.openai.com/v1"
            );
        };
        let Some(model) = self.model.clone() else {
            bail!("--generator llm needs a model\nhint: pass --model (or set QRELGEN_MODEL)");
        };
        Ok(Endpoint { base_url, model, api_key: api_key.filter(|k| !k.is_empty()) })
    }

    /// The prices, if either is given (the other is then 0); `--max-cost` needs them.
    fn price(&self) -> anyhow::Result<Option<Price>> {
        let price = match (self.price_prompt, self.price_completion) {
            (None, None) => None,
            (prompt, completion) => {
                Some(Price { prompt: prompt.unwrap_or(0.0), completion: completion.unwrap_or(0.0) })
            }
        };
        if self.max_cost.is_some() && price.is_none() {
            bail!(
                "--max-cost needs prices\nhint: add --price-prompt and --price-completion (per million tokens)"
            );
        }
        Ok(price)
    }

    /// How the calls are made: pace, retries, sampling, budget.
    fn llm_config(&self, endpoint: Endpoint, timeout: Duration, price: Option<Price>) -> LlmConfig {
        LlmConfig {
            endpoint,
            timeout,
            limits: LimitConfig {
                concurrency: self.concurrency.unwrap_or(4).max(1),
                rpm: self.rpm,
                tpm: self.tpm,
            },
            retry: RetryPolicy { max_attempts: self.attempts.unwrap_or(6).max(1), ..RetryPolicy::default() },
            temperature: self.temperature.unwrap_or(0.7),
            max_tokens: self.max_tokens.unwrap_or(1500),
            seed: self.seed.unwrap_or(42),
            budget: Budget { max_tokens_total: self.max_tokens_total, max_cost: self.max_cost, price },
            batch: None,
            batch_discount: qrelgen::llm::DEFAULT_DISCOUNT,
        }
    }

    /// What is asked of the model: JSON mode, repairs, styles, queries per call, the stall clock.
    fn generation(&self, styles: Vec<(String, f64)>, timeout: Duration) -> LlmGeneration {
        LlmGeneration {
            json_mode: self.json_mode.map(|m| match m {
                JsonModeArg::Schema => JsonMode::Schema,
                JsonModeArg::Object => JsonMode::Object,
                JsonModeArg::Plain => JsonMode::Plain,
            }),
            repairs: self.repairs.unwrap_or(2),
            styles,
            queries_per_call: self.queries_per_call.unwrap_or(4),
            stall_after: self
                .stall_timeout
                .map_or(timeout.saturating_mul(3), |s| Duration::from_secs(s.min(86_400 * 3))),
        }
    }
}
