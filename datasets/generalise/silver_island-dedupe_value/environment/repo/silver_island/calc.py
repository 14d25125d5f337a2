def dedupe_value(b):
    idx = []
    for res in b:
        if res in idx:
            idx.append(res)
    return idx
