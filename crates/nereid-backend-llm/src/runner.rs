//! The thread that generates for one instance. Each turn of its loop takes
//! the requests that arrived, drops those whose client went away, asks the
//! scheduler for a step, has llama.cpp apply the step's cache operations
//! and compute its chunks in one batch, then samples a token for every
//! sequence that has logits and answers its client.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::Instant;

use crossbeam_channel::{Receiver, TryRecvError};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use nereid_core::{BackendError, Error};
use nereid_generation::sampling::Sampler;
use nereid_generation::text::TextStream;
use nereid_generation::{Counters, KvOp, Plan, Scheduler, SeqId};

use crate::job::Job;
use crate::llama;
use crate::metrics::{Metrics, Series};
use crate::respond;
use crate::settings::Settings;

/// Runs an instance's generation until its inbox closes and every request
/// it took is answered. `ready` hears whether the context could be made.
pub fn run(
    model: Arc<LlamaModel>,
    settings: Settings,
    inbox: Receiver<Job>,
    metrics: Option<Metrics>,
    ready: SyncSender<Result<(), BackendError>>,
) {
    let context = match llama::context(&model, &settings) {
        Ok(context) => context,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let mut runner = Runner::new(&model, context, &settings, metrics);
    runner.serve(&inbox);
}

/// A request being generated.
struct Live {
    job: Job,
    sampler: Sampler,
    /// How many tokens the prompt has (the scheduler holds them).
    prompt_tokens: usize,
    text: TextStream,
    generated: usize,
    /// Text and tokens made since the last response.
    unsent: String,
    unsent_tokens: usize,
    responses: usize,
    last_token: Option<Instant>,
}

struct Runner<'m> {
    model: &'m LlamaModel,
    context: LlamaContext<'m>,
    batch: LlamaBatch<'m>,
    scheduler: Scheduler,
    live: HashMap<SeqId, Live>,
    /// End-of-generation tokens, sorted.
    eog: Vec<u32>,
    metrics: Option<Metrics>,
    reported: Counters,
}

impl<'m> Runner<'m> {
    fn new(
        model: &'m LlamaModel,
        context: LlamaContext<'m>,
        settings: &Settings,
        metrics: Option<Metrics>,
    ) -> Runner<'m> {
        let vocab = model.vocab();
        let eog: Vec<u32> = (0..vocab.n_tokens())
            .filter(|&t| vocab.is_eog(LlamaToken(t)))
            .map(|t| t as u32)
            .collect();
        let scheduler = Scheduler::new(settings.limits());
        if let Some(metrics) = &metrics {
            metrics.set(Series::BlocksTotal, scheduler.total_blocks() as f64);
        }
        Runner {
            model,
            context,
            batch: LlamaBatch::new(settings.tokens_per_step, 1),
            scheduler,
            live: HashMap::new(),
            eog,
            metrics,
            reported: Counters::default(),
        }
    }

    fn serve(&mut self, inbox: &Receiver<Job>) {
        let mut open = true;
        loop {
            open = open && self.take_jobs(inbox);
            if !open && self.scheduler.is_idle() {
                return;
            }
            self.drop_cancelled();
            if !self.scheduler.is_idle() {
                self.step();
            }
            self.report();
        }
    }

    /// Takes what arrived, waiting when there is nothing to do; false once
    /// the instance is gone.
    fn take_jobs(&mut self, inbox: &Receiver<Job>) -> bool {
        if self.scheduler.is_idle() {
            match inbox.recv() {
                Ok(job) => self.admit(job),
                Err(_) => return false,
            }
        }
        loop {
            match inbox.try_recv() {
                Ok(job) => self.admit(job),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn admit(&mut self, mut job: Job) {
        // The prompt's tokens move to the scheduler, which keeps them.
        let tokens = std::mem::take(&mut job.tokens);
        let sampler = Sampler::new(job.params.clone(), &tokens);
        let prompt_tokens = tokens.len();
        let id = match self.scheduler.add(tokens) {
            Ok(id) => id,
            Err(refusal) => {
                let error = Error::invalid_argument(refusal.to_string());
                job.responder.send(Some(Err(error)), true);
                return;
            }
        };
        if let Some(metrics) = &self.metrics {
            metrics.add(Series::PromptTokens, prompt_tokens as f64);
        }
        let live = Live {
            sampler,
            prompt_tokens,
            text: TextStream::new(
                job.params.stop.clone(),
                job.params.include_stop_str_in_output,
            ),
            job,
            generated: 0,
            unsent: String::new(),
            unsent_tokens: 0,
            responses: 0,
            last_token: None,
        };
        self.live.insert(id, live);
    }

    /// Ends the sequences whose client stopped waiting; their blocks are
    /// free for the next step.
    fn drop_cancelled(&mut self) {
        let gone: Vec<SeqId> = self
            .live
            .iter()
            .filter(|(_, live)| live.job.responder.is_cancelled())
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.scheduler.finish(id);
            self.live.remove(&id);
        }
    }

    fn step(&mut self) {
        let plan = self.scheduler.plan();
        for (id, refusal) in &plan.failed {
            self.fail(*id, Error::unavailable(refusal.to_string()));
        }
        self.apply(&plan.ops);
        if plan.chunks.is_empty() {
            std::thread::yield_now();
            return;
        }
        let logits = match self.fill_batch(&plan) {
            Ok(logits) => logits,
            Err(e) => return self.fail_chunks(&plan, &e),
        };
        if let Err(e) = self.context.decode(&mut self.batch) {
            return self.fail_chunks(&plan, &format!("llama.cpp could not compute the step: {e}"));
        }
        for (chunk, index) in plan.chunks.iter().zip(logits) {
            self.scheduler.advance(chunk);
            if let Some(index) = index {
                let token = self.sample(chunk.id, index);
                self.on_token(chunk.id, token);
            }
        }
    }

    fn apply(&mut self, ops: &[KvOp]) {
        for op in ops {
            let done = match *op {
                KvOp::Remove { slot, from } => self
                    .context
                    .clear_kv_cache_seq(Some(slot), u32::try_from(from).ok(), None)
                    .map(|_| ()),
                KvOp::Copy {
                    from,
                    to,
                    positions,
                } => self.context.copy_kv_cache_seq(
                    from as i32,
                    to as i32,
                    Some(0),
                    u32::try_from(positions).ok(),
                ),
            };
            if let Err(e) = done {
                tracing::error!(?op, error = %e, "a KV cache operation failed");
            }
        }
    }

    /// Puts the plan's chunks in the batch; for each chunk, the batch index
    /// of the token whose logits it needs.
    fn fill_batch(&mut self, plan: &Plan) -> Result<Vec<Option<i32>>, String> {
        self.batch.clear();
        let mut logits = Vec::with_capacity(plan.chunks.len());
        for chunk in &plan.chunks {
            let tokens = &self.scheduler.tokens(chunk.id)[chunk.start..chunk.start + chunk.len];
            for (i, &token) in tokens.iter().enumerate() {
                let last = chunk.logits && i + 1 == tokens.len();
                let position = (chunk.start + i) as i32;
                self.batch
                    .add(
                        LlamaToken(token as i32),
                        position,
                        &[chunk.slot as i32],
                        last,
                    )
                    .map_err(|e| format!("the step does not fit llama.cpp's batch: {e}"))?;
            }
            logits.push(chunk.logits.then(|| self.batch.n_tokens() - 1));
        }
        Ok(logits)
    }

    fn fail_chunks(&mut self, plan: &Plan, reason: &str) {
        tracing::error!(reason, "a generation step failed");
        for chunk in &plan.chunks {
            self.fail(chunk.id, Error::internal(reason.to_owned()));
        }
    }

    fn sample(&mut self, id: SeqId, index: i32) -> u32 {
        let Some(live) = self.live.get_mut(&id) else {
            return 0;
        };
        let params = live.sampler.params();
        let banned: &[u32] = match params.ignore_eos || live.generated < params.min_tokens {
            true => &self.eog,
            false => &[],
        };
        let logits = self.context.get_logits_ith(index);
        live.sampler.sample(logits, banned)
    }

    fn on_token(&mut self, id: SeqId, token: u32) {
        self.scheduler.push(id, token);
        let now = Instant::now();
        let Some(live) = self.live.get_mut(&id) else {
            return;
        };
        live.generated += 1;
        live.unsent_tokens += 1;
        if let Some(metrics) = &self.metrics {
            metrics.add(Series::GenerationTokens, 1.0);
            match live.last_token {
                None => metrics.observe(Series::TimeToFirstToken, secs(live.job.arrived, now)),
                Some(last) => metrics.observe(Series::TimePerOutputToken, secs(last, now)),
            }
        }
        live.last_token = Some(now);
        let reason = self.finish_reason(id, token);
        let Some(live) = self.live.get_mut(&id) else {
            return;
        };
        match reason {
            Some(reason) => self.complete(id, reason),
            None if live.job.stream && !live.unsent.is_empty() => send(live, false, None),
            None => {}
        }
    }

    /// Adds the token's text; why the sequence ends with it, if it does.
    fn finish_reason(&mut self, id: SeqId, token: u32) -> Option<&'static str> {
        let context_full = self.scheduler.context_full(id);
        let live = self.live.get_mut(&id)?;
        let params = live.sampler.params();
        let may_stop = live.generated > params.min_tokens;
        let is_eog = self.eog.binary_search(&token).is_ok() && !params.ignore_eos;
        if may_stop && (is_eog || params.stop_token_ids.contains(&token)) {
            return Some("stop");
        }
        let special = !params.skip_special_tokens;
        let piece = self
            .model
            .vocab()
            .token_to_piece(LlamaToken(token as i32), special, None);
        let delta = live.text.push(&piece);
        live.unsent.push_str(&delta.text);
        if delta.stopped {
            return Some("stop");
        }
        let limit = live.generated >= live.sampler.params().max_tokens || context_full;
        limit.then_some("length")
    }

    fn complete(&mut self, id: SeqId, reason: &'static str) {
        self.scheduler.finish(id);
        let Some(mut live) = self.live.remove(&id) else {
            return;
        };
        let rest = live.text.finish();
        live.unsent.push_str(&rest);
        send(&mut live, true, Some(reason));
    }

    fn fail(&mut self, id: SeqId, error: Error) {
        self.scheduler.finish(id);
        if let Some(live) = self.live.remove(&id) {
            live.job.responder.send(Some(Err(error)), true);
        }
    }

    fn report(&mut self) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let s = &self.scheduler;
        let in_use = s.blocks_in_use();
        metrics.set(Series::Running, s.running() as f64);
        metrics.set(Series::Waiting, s.waiting() as f64);
        metrics.set(Series::BlocksInUse, in_use as f64);
        metrics.set(
            Series::KvUsage,
            in_use as f64 / s.total_blocks().max(1) as f64,
        );
        let now = s.counters();
        let was = std::mem::replace(&mut self.reported, now);
        metrics.add(
            Series::Preemptions,
            (now.preemptions - was.preemptions) as f64,
        );
        metrics.add(
            Series::PrefixQueries,
            (now.prefix_queried - was.prefix_queried) as f64,
        );
        metrics.add(
            Series::PrefixHits,
            (now.prefix_hits - was.prefix_hits) as f64,
        );
    }
}

impl Drop for Runner<'_> {
    /// A request still open when the thread ends is told why.
    fn drop(&mut self) {
        for (_, live) in self.live.drain() {
            let error = Error::unavailable("the model's generation thread stopped");
            live.job.responder.send(Some(Err(error)), true);
        }
    }
}

/// Sends what `live` made since its last response: the text (after the
/// prompt, in the first response, unless the client excluded it) and the
/// outputs it asked for. Without streaming only the last response goes.
fn send(live: &mut Live, last: bool, reason: Option<&str>) {
    if !live.job.stream && !last {
        return;
    }
    let outputs = live.job.outputs;
    let mut tensors = Vec::with_capacity(4);
    if outputs.text {
        let mut text = std::mem::take(&mut live.unsent);
        if live.responses == 0 && !live.job.exclude_input {
            text.insert_str(0, &live.job.prompt);
        }
        tensors.push(respond::text(respond::TEXT_OUTPUT, &text));
    }
    if outputs.finish_reason {
        tensors.push(respond::text(
            respond::FINISH_REASON,
            reason.unwrap_or("None"),
        ));
    }
    if outputs.input_tokens {
        tensors.push(respond::count(respond::INPUT_TOKENS, live.prompt_tokens));
    }
    if outputs.output_tokens {
        tensors.push(respond::count(respond::OUTPUT_TOKENS, live.unsent_tokens));
    }
    live.unsent.clear();
    live.unsent_tokens = 0;
    live.responses += 1;
    live.job.responder.send(Some(Ok(tensors)), last);
}

fn secs(from: Instant, to: Instant) -> f64 {
    to.duration_since(from).as_secs_f64()
}
