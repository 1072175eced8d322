//! The stages a round runs besides the round trip: the generator the settings ask for and, with
//! an LLM generator, the LLM judge, both holding the run's one LLM session.

use crate::config::{BuildConfig, GeneratorConfig};
use crate::error::{Error, Result};
use crate::generate::{Generator, LlmGenerator, OfflineGenerator, Preflight, Prompts};
use crate::index::ChunkIndex;
use crate::judge::LlmJudge;
use crate::llm::{BatchMode, Cache, Llm, Session};
use crate::output::layout;
use crate::progress::Progress;
use crate::text::Language;
use crate::topics::CorpusModel;
use std::path::Path;

/// The stages a round runs besides the round trip: the generator, and the LLM judge when an LLM
/// writes the queries (both hold the run's one LLM session).
pub(crate) struct RoundStages<'a> {
    pub(crate) generator: Box<dyn Generator + 'a>,
    pub(crate) judge: Option<LlmJudge<'a>>,
}

/// The generator the config asks for, and with an LLM generator the LLM judge, both holding one
/// LLM session. The offline generator uses `model` (the corpus model of `index`'s chunks, kept
/// beside the index) or builds it and keeps it there, for a later refresh to fold changes into.
pub(crate) fn make_stages<'a>(
    config: &BuildConfig,
    index: &'a ChunkIndex,
    out: &Path,
    language: Language,
    progress: Progress,
    model: Option<CorpusModel>,
) -> Result<RoundStages<'a>> {
    let setup = match &config.generator {
        GeneratorConfig::Offline => {
            let model = match model {
                Some(kept) => kept,
                None => CorpusModel::build(index)?.save_beside(index)?,
            };
            let generator = OfflineGenerator::new(index, config.seed, language, config.topics, model)?;
            return Ok(RoundStages { generator: Box::new(generator), judge: None });
        }
        GeneratorConfig::Llm(setup) => setup,
    };
    let prompts = Prompts::load(setup.prompts.as_deref(), language)?;
    let cache_path = setup.cache.clone().unwrap_or_else(|| out.join(layout::LLM_CACHE));
    let llm = Llm::new(setup.llm.clone(), Cache::open(&cache_path)?).map_err(|e| Error::Endpoint {
        url: crate::llm::redact_url(&setup.llm.endpoint.base_url),
        message: e.chain(),
        hint: "check --base-url (e.g. http://127.0.0.1:8080/v1)",
    })?;
    if let Some(BatchMode::Import { from, .. }) = setup.llm.batch.as_ref().map(|b| &b.mode) {
        let imported = llm.import(from)?;
        progress.stage("batch", 0).finish(&format!(
            "imported {} replies from {} ({} failed, {} not run, {} unreadable lines, {} unknown custom_id(s) \
             rejected, {} duplicate(s) of a call already answered dropped: the first reply stands)",
            imported.replies,
            from.display(),
            imported.failed,
            imported.not_run,
            imported.unreadable,
            imported.unknown,
            imported.duplicates
        ));
    }
    // A batch runner of the user's own may have no online endpoint to probe.
    let offline_batch = setup.llm.batch.as_ref().is_some_and(|b| !matches!(b.mode, BatchMode::Submit));
    let preflight = if config.dry_run || offline_batch { Preflight::Skip } else { Preflight::Run };
    let session = std::sync::Arc::new(Session::new(llm, setup.generation.stall_after)?);
    let generation = setup.generation.clone();
    let repairs = generation.repairs;
    let generator = LlmGenerator::new(
        index,
        std::sync::Arc::clone(&session),
        prompts.clone(),
        generation,
        config.seed,
        preflight,
    )?;
    let judge = LlmJudge::new(index, session, prompts, generator.response_mode(), repairs);
    Ok(RoundStages { generator: Box::new(generator), judge: Some(judge) })
}

pub(super) fn generator_line(generator: &dyn Generator, language: Language) -> String {
    match generator.llm_report() {
        Some(report) => format!(
            "{} at {}, {} output ({}), queries in {}",
            report.summary.model,
            report.summary.base_url,
            report.summary.json_mode.label(),
            report.mode_reason,
            language.name()
        ),
        None => format!("offline generator, queries in {}", language.name()),
    }
}
