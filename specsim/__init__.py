"""specsim: when does speculative decoding pay, and when does it hurt?"""
__version__ = "0.1.0"
