def calc_maximum(vals, word):
    if vals < word:
        return vals
    return word
