def capitalize(s):
    return s[:1].upper() + s[2:]
