"""Run in .venv-runtime by test_export.py: load exported directories the way users do (transformers, peft)
and print, per directory, the target-token logprobs of one sequence as a JSON list.

    python export_check.py TOKENS_JSON DIR:merged|adapter...
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ids, results = json.loads(sys.argv[1]), []
for arg in sys.argv[2:]:
    out_dir, mode = arg.rsplit(":", 1)
    if mode == "adapter":
        from peft import PeftModel

        base = json.load(open(f"{out_dir}/adapter_config.json"))["base_model_name_or_path"]
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), out_dir)
    else:
        model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(out_dir)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0].float()
    lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    results.append({"logprobs": lp.tolist(), "chat_template": bool(tok.chat_template)})
print(json.dumps(results))
