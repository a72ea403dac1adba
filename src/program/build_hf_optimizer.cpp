// The hf builder's optimizer step: torch.optim's AdamW and SGD, and bitsandbytes' 8-bit and paged
// AdamW, over the trainable parameters in their order.
#include <utility>

#include "program/hf_builder.h"

namespace vrambench::build_hf {

// torch.optim.AdamW: foreach on CUDA, whose step makes sqrt(exp_avg_sq) for every parameter at
// once: _foreach_sqrt allocates one temporary per parameter, in the parameters' order, and the
// list goes after the last update (the first and the last step op hold them all); the
// single-tensor loop (CPU) makes sqrt(exp_avg_sq) and its quotient for one parameter at a time.
// bitsandbytes' optimizers update each parameter in one kernel, in place: 8-bit state where the
// parameter has it, 32-bit elsewhere.
void HfBuilder::add_optimizer() {
  if (cfg_.optimizer == Optimizer::none || params_.empty()) return;
  // The trainable parameters share a dtype: the model's, or the adapters' fp32.
  const DType dtype = dtype_of(params_.front().w);
  TensorIds foreach_temps;
  if (cfg_.optimizer == Optimizer::adamw && !cpu_)
    for (const Param& p : params_)
      foreach_temps.push_back(tensor(p_.tensor(p.w).name + ".exp_avg_sq.sqrt", {p.numel}, dtype,
                                     Role::transient, MemoryComponent::optimizer_temporaries));
  // torch.optim makes every parameter's state (_init_group) before it updates one: the first
  // step op holds it all, so that a run's first step makes it there, in the parameters' order.
  TensorIds state;
  if (cfg_.optimizer == Optimizer::adamw || cfg_.optimizer == Optimizer::sgd)
    for (const Param& p : params_)
      for (int id : {p.m, p.v, p.momentum})
        if (id >= 0) state.push_back(id);
  const Param* last = &params_.back();
  for (const Param& param : params_) {
    const Name name = p_.tensor(param.w).name + ".step";
    if (is_adamw(cfg_.optimizer)) {
      const bool eight_bit = param.m_absmax >= 0;
      TensorIds in{param.w, param.grad, param.m, param.v};
      if (eight_bit) in.insert(in.end(), {param.m_absmax, param.v_absmax});
      Op& o = op(eight_bit ? OpKind::adamw8bit_step : OpKind::adamw_step, name, std::move(in), {},
                 param.layer);
      o.grad_scale = loss_scale_;
      o.weight_decay = 0.01f;  // torch's AdamW default, and bitsandbytes'
      if (&param == &params_.front()) {
        o.held.insert(o.held.end(), state.begin(), state.end());
        // bitsandbytes moves its quantisation maps to the device at its first step.
        if (qmaps_ >= 0) o.held.push_back(qmaps_);
      }
      if (cfg_.optimizer != Optimizer::adamw) continue;
      if (foreach_temps.empty())
        o.held.push_back(tensor(name + ".denom", {2, param.numel}, dtype, Role::transient,
                                MemoryComponent::optimizer_temporaries));
      else if (&param == &params_.front() || &param == last)
        o.held.insert(o.held.end(), foreach_temps.begin(), foreach_temps.end());
    } else {
      Op& o = op(OpKind::sgd_step, name, {param.w, param.grad, param.momentum}, {}, param.layer);
      o.grad_scale = loss_scale_;
      if (&param == &params_.front()) o.held.insert(o.held.end(), state.begin(), state.end());
    }
  }
}

}  // namespace vrambench::build_hf
