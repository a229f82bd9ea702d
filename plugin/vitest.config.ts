import { defineConfig } from 'vitest/config';

// Unit tests for the frontend run in jsdom; @grafana/ui components render for real (no mocks of Grafana's packages).
export default defineConfig({
  esbuild: { jsx: 'automatic' },
  test: {
    environment: 'jsdom',
    include: ['src/**/*.test.{ts,tsx}'],
    setupFiles: ['src/test/setup.ts'],
    testTimeout: 20000,
    // @grafana/ui imports CSS from its dependencies; inlining lets Vite handle those imports instead of Node.
    server: { deps: { inline: [/@grafana\//, /@rc-component\//, /rc-[a-z-]+/] } },
  },
});
