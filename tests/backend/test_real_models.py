"""Real models nobody here wrote: Hugging Face GPT-2 and BERT from small configs with random weights
(nothing is downloaded) train on sim exactly as on the CPU, and GPT-2 generates the same tokens."""
from __future__ import annotations

import copy

import pytest
import torch
import transformers  # a test dependency (pyproject's test extra): a missing one fails, never skips


def gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def bert() -> torch.nn.Module:
    config = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    return transformers.BertForMaskedLM(config)


def train(model: torch.nn.Module, device: str, steps: int = 3) -> list[float]:
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, 128, (2, 16), generator=generator).to(device)
        torch.manual_seed(2)  # the same dropout masks on both devices
        torch.sim.manual_seed(2)
        optimizer.zero_grad()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("build", [gpt2, bert], ids=["gpt2", "bert"])
def test_training_matches_the_cpu_bit_for_bit(build):
    cpu_model = build()
    sim_model = copy.deepcopy(cpu_model)
    assert train(sim_model, "sim") == train(cpu_model, "cpu")
    for (name, p_cpu), p_sim in zip(cpu_model.named_parameters(), sim_model.parameters()):
        assert torch.equal(p_cpu.detach(), p_sim.detach().cpu()), name


def test_gpt2_keeps_its_tied_head_on_sim():
    model = gpt2().to("sim")
    assert model.lm_head.weight is model.transformer.wte.weight


def test_gpt2_greedy_generation_matches_the_cpu():
    cpu_model = gpt2().eval()
    sim_model = copy.deepcopy(cpu_model).to("sim")
    prompt = torch.tensor([[5, 17, 42, 7]])
    settings = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    on_cpu = cpu_model.generate(prompt, attention_mask=torch.ones_like(prompt), **settings)
    on_sim = sim_model.generate(prompt.to("sim"), attention_mask=torch.ones_like(prompt).to("sim"), **settings)
    assert on_sim.device.type == "sim"
    assert on_sim.cpu().tolist() == on_cpu.tolist()
