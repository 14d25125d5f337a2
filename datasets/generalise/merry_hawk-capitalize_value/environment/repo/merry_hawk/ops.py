def capitalize_value(word):
    return word[:1].upper() + word[2:]
