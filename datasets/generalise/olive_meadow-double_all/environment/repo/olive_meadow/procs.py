def double_all(k):
    return [step * step for step in k]
