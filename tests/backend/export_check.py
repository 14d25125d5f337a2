"""Run in .venv-runtime by test_export.py: load an exported directory the way users do (transformers, peft)
and print the target-token logprobs of one sequence as JSON.

    python export_check.py DIR merged|adapter TOKENS_JSON
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

out_dir, mode, ids = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
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
print(json.dumps({"logprobs": lp.tolist(), "chat_template": bool(tok.chat_template)}))
